"""The model process's thread count, measured at start (neobert.serving.threads): each measured answer
forced, the pins, the cache, and /info plus the start-up line over real HTTP."""

from __future__ import annotations

import pytest

from neobert.serving import threads
from neobert.serving.threads import THREADS_ENV, ThreadChoice, candidates, choose_threads, measure, pick


def fake_probe(ms: dict[int, float]):
    calls = []

    def probe(n: int) -> float:
        calls.append(n)
        return ms[n] / 1e3

    probe.calls = calls
    return probe


@pytest.fixture
def unpinned(monkeypatch):
    monkeypatch.delenv(THREADS_ENV, raising=False)
    monkeypatch.setattr(threads, "_CACHE", {})


def test_candidates():
    assert candidates(1) == [1]
    assert candidates(2) == [1, 2]
    assert candidates(16) == [1, 8, 15, 16]


def test_pick_takes_the_fewest_threads_within_the_margin():
    assert pick({1: 100.0, 2: 50.0}) == 2  # twice as fast: worth the core
    assert pick({1: 100.0, 2: 90.0}) == 1  # 1.11x: not worth taking the HTTP side's core
    assert pick({1: 100.0, 8: 40.0, 15: 30.0, 16: 29.0}) == 15  # 16 is within 1.2x of... 15 is fewer
    assert pick({1: 100.0, 2: 84.0}, margin=1.2) == 1 and pick({1: 100.0, 2: 83.0}, margin=1.2) == 2


def test_measured_more_threads_faster(unpinned):
    probe = fake_probe({1: 120.0, 2: 60.0})
    choice = choose_threads(0, probe, cores=2)
    assert choice.threads == 2 and choice.timings_ms == {1: 120.0, 2: 60.0}
    assert "measured at start" in choice.reason and "1: 120 ms, 2: 60 ms" in choice.reason


def test_measured_one_thread_faster(unpinned):
    choice = choose_threads(0, fake_probe({1: 10.0, 2: 14.0}), cores=2)
    assert choice.threads == 1 and "measured" in choice.reason


def test_measure_interleaves_candidates_after_a_warm_up():
    probe = fake_probe({1: 5.0, 2: 3.0})
    assert measure(probe, [1, 2], min_rounds=2, max_rounds=2) == {1: 5.0, 2: 3.0}
    assert probe.calls == [1, 2, 1, 2, 1, 2]


def test_measure_scores_the_median_round_so_an_interrupted_multithreaded_call_counts():
    """Two threads usually faster, but interrupted in two of five rounds (other work, the HTTP side): the
    median says so, where a best-of would pick 2 threads."""
    rounds = iter([9, 5, 9, 6, 9, 200, 9, 5, 9, 210, 9, 5])  # warm-up (9, 5), then 5 rounds of (1, 2)

    def probe(n):
        return next(rounds) / 1e3

    timings = measure(probe, [1, 2], min_rounds=5, max_rounds=5)
    assert timings == {1: 9.0, 2: 6.0}
    more = iter([9, 5, 9, 200, 9, 210, 9, 5, 9, 220, 9, 6])  # interrupted in three of five: 1 thread
    assert pick(measure(lambda n: next(more) / 1e3, [1, 2], min_rounds=5, max_rounds=5)) == 1


def test_measure_adds_rounds_within_its_budget():
    probe = fake_probe({1: 1.0, 2: 1.0})  # 2 ms a round: all nine rounds fit in the budget
    measure(probe, [1, 2], min_rounds=3, max_rounds=9, budget=2.0)
    assert len(probe.calls) == 2 * (1 + 9)
    slow = fake_probe({1: 600.0, 2: 600.0})  # 1.2 s a round: the third round ends it
    measure(slow, [1, 2], min_rounds=3, max_rounds=9, budget=2.0)
    assert len(slow.calls) == 2 * (1 + 3)


def test_pins_and_shares(unpinned, monkeypatch):
    never = fake_probe({})
    assert choose_threads(3, never, cores=2) == ThreadChoice(3, "pinned by --threads")
    monkeypatch.setenv(THREADS_ENV, "2")
    assert choose_threads(0, never, cores=8) == ThreadChoice(2, f"pinned by {THREADS_ENV}")
    assert choose_threads(1, never, cores=8).reason == "pinned by --threads"  # the option wins
    monkeypatch.setenv(THREADS_ENV, "two")
    with pytest.raises(ValueError, match=f"{THREADS_ENV} must be a positive integer, got 'two'"):
        choose_threads(0, never, cores=8)
    monkeypatch.delenv(THREADS_ENV)
    assert choose_threads(0, never, cores=8, workers=3) == ThreadChoice(2, "3 model processes share 8 cores")
    assert choose_threads(0, never, cores=1).threads == 1
    assert never.calls == []  # none of these measured


def test_cached_per_model_and_cores(unpinned):
    first = fake_probe({1: 10.0, 2: 4.0})
    assert choose_threads(0, first, cores=2, key="m").threads == 2
    again = fake_probe({1: 1.0, 2: 4.0})
    assert choose_threads(0, again, cores=2, key="m").threads == 2 and again.calls == []
    assert choose_threads(0, again, cores=2, key="other").threads == 1


def test_fixed_threads_for_onnx(unpinned, monkeypatch):
    monkeypatch.setattr(threads, "available_cores", lambda: 4)
    assert threads.fixed_threads(0, "why").threads == 3
    assert threads.fixed_threads(2, "why") == ThreadChoice(2, "pinned by --threads")


@pytest.mark.parametrize("timings, chosen", [({1: 50.0, 2: 20.0}, 2), ({1: 20.0, 2: 50.0}, 1)])
def test_info_and_startup_line_say_what_was_chosen_and_why(unpinned, monkeypatch, model_dir, timings, chosen):
    """The real Model.load with each measured answer forced (the probe itself runs; its timings are
    replaced), served over HTTP: /info and the start-up line name the count and the reason."""
    pytest.importorskip("fastapi")
    from helpers import call
    from neobert.serving import ServeConfig
    from neobert.serving.server import BackgroundServer
    from neobert.serving.service import Service

    measured = []

    def forced(probe, options, **_):
        measured.append(probe(1) > 0)  # the real probe runs one model call
        return {n: timings[n] for n in options}

    monkeypatch.setattr(threads, "measure", forced)
    monkeypatch.setattr(threads, "available_cores", lambda: 2)
    service = Service.load(ServeConfig(model=str(model_dir), precision="fp32", model_process=False))
    with BackgroundServer(service) as srv:
        status, info, _ = call(srv.url, "GET", "/info", key=None)
    assert measured == [True]
    assert status == 200 and info["threads"] == chosen
    assert info["threads_reason"].startswith("measured at start")
    assert f"{chosen} model thread(s): measured at start" in service.startup_line()


def test_pinned_threads_in_info(model_dir):
    pytest.importorskip("fastapi")
    from helpers import call, serve

    with serve(model_dir, threads=1) as srv:
        info = call(srv.url, "GET", "/info", key=None)[1]
    assert (info["threads"], info["threads_reason"]) == (1, "pinned by --threads")

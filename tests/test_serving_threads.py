"""The model process's thread count, measured at start (neobert.serving.threads): each measured answer
forced, the pins, the cache, and /info plus the start-up line over real HTTP; then the count per call under
load (threads_for_call on every branch, the HTTP side's CPU per text, the service sending each call its
count, and a real server's per-thread-count metric)."""

from __future__ import annotations

import pytest

from neobert.serving import threads
from neobert.serving.tasks import ModelCall
from neobert.serving.threads import (
    PROBE_TEXTS,
    THREADS_ENV,
    ExportPlacement,
    HttpCost,
    ThreadChoice,
    ThreadPolicy,
    candidates,
    choose_pair,
    choose_threads,
    lone_placement,
    measure,
    per_text,
    pick,
    threads_for_call,
)


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


def scripted(ms: dict[int, list[float]]):
    """A probe that answers each candidate's milliseconds in turn (the last one repeats)."""
    calls, left = [], {n: list(values) for n, values in ms.items()}

    def probe(n: int) -> float:
        calls.append(n)
        return (left[n].pop(0) if len(left[n]) > 1 else left[n][0]) / 1e3

    probe.calls = calls
    return probe


def test_measure_interleaves_candidates_after_a_warm_up():
    probe = fake_probe({1: 5.0, 2: 3.0})
    assert measure(probe, [1, 2], min_rounds=2, max_rounds=2) == {1: 5.0, 2: 3.0}
    assert probe.calls == [1, 1, 2, 2, 1, 2, 1, 2]  # each warmed up until two calls agree, then rounds


def test_measure_scores_the_median_round_so_an_interrupted_multithreaded_call_counts():
    """Two threads usually faster, but interrupted in two of five rounds (other work, the HTTP side): the
    median says so, where a best-of would pick 2 threads."""
    probe = scripted({1: [9], 2: [5, 5, 5, 6, 200, 5, 210]})  # warm-up (5, 5), then five rounds
    assert measure(probe, [1, 2], min_rounds=5, max_rounds=5) == pytest.approx({1: 9.0, 2: 6.0})
    more = scripted({1: [9], 2: [5, 5, 5, 200, 210, 5, 220]})  # interrupted in three of five: 1 thread
    assert pick(measure(more, [1, 2], min_rounds=5, max_rounds=5)) == 1


def test_the_warm_up_absorbs_a_cold_start():
    """A cold model's first calls are slow, and slow differently per thread count (issue 31: one start
    measured 207 ms, another 113 ms on one thread): the warm-up goes on until two calls agree, so the
    rounds time the warm model. One warm-up call would leave the cold calls in the rounds and pick 1."""
    probe = scripted({1: [400, 300, 200, 100, 100], 2: [300, 250, 200, 150, 55]})
    timings = measure(probe, [1, 2])
    assert timings == pytest.approx({1: 100.0, 2: 55.0}) and pick(timings) == 2
    assert probe.calls[:10] == [1] * 5 + [2] * 5  # five warm-up calls each, the cap


def test_scores_pair_each_round_so_drift_between_rounds_cancels():
    """The machine slows down for a while (other work): rounds that are slow for every candidate move none
    against another; each candidate is scored by its time over the first candidate's in the same round."""
    times = {1: [100.0, 300.0, 310.0, 100.0, 290.0], 2: [55.0, 165.0, 170.0, 55.0, 160.0]}
    scores = threads.paired_medians(times)
    assert scores[1] == 290.0 and scores[2] == pytest.approx(290.0 * 0.55)
    assert pick(scores) == 2


def test_a_close_call_takes_more_rounds():
    """Two threads measure 1.19x faster in the first rounds (just under the margin), then 1.8x: a close
    call goes on past the budget (up to twice it) and decides on the later rounds; stopping at the budget
    would pick 1 thread."""
    probe = scripted({1: [100], 2: [84, 84, 84, 84, 84, 84, 84, 84, 55]})  # warm-up (84, 84), 7 rounds at 84
    timings = measure(probe, [1, 2], min_rounds=5, max_rounds=15, budget=1.2)
    assert pick(timings) == 2 and timings[2] < 84
    rounds = (len(probe.calls) - 4) // 2
    assert 7 < rounds < 15  # past the budget (7 rounds), stopped once it was no longer close


def test_measure_adds_rounds_within_its_budget():
    probe = fake_probe({1: 1.0, 2: 1.0})  # 2 ms a round: all nine rounds fit in the budget
    measure(probe, [1, 2], min_rounds=3, max_rounds=9, budget=2.0)
    assert len(probe.calls) == 2 * (2 + 9)
    slow = fake_probe({1: 600.0, 2: 600.0})  # 1.2 s a round: the third round ends it (not a close call)
    measure(slow, [1, 2], min_rounds=3, max_rounds=9, budget=2.0)
    assert len(slow.calls) == 2 * (2 + 3)


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
    """The real TorchBackend.load with each measured answer forced (the probe itself runs; its timings are
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


# --- the count per call under load ---------------------------------------------------------------------

# The probes on a 2-core Xeon (AVX-512 BF16), in ms for PROBE_TEXTS texts
SMALL = ThreadChoice(2, "measured", {1: 7.0, 2: 5.6}, 2)  # 1.75 and 1.4 ms a text
NEOBERT = ThreadChoice(2, "measured", {1: 287.0, 2: 168.0}, 2)  # 71.75 and 42 ms a text


def test_threads_for_call_without_backlog_or_estimate_keeps_the_start_up_choice():
    assert PROBE_TEXTS == 4
    assert threads_for_call(SMALL, 2, backlog=0, http_ms_per_text=1.0) == 2  # one client: lowest latency
    assert threads_for_call(SMALL, 2, backlog=5, http_ms_per_text=None) == 2  # the HTTP side not measured yet
    light = ThreadChoice(1, "measured", {1: 7.0, 2: 12.0}, 2)
    assert threads_for_call(light, 2, backlog=0, http_ms_per_text=0.0) == 1


def test_threads_for_call_under_backlog_small_takes_one_thread_neobert_two():
    # small: 1 thread beside the HTTP side, max(1.75, h), against 2 threads sharing the cores, 1.4 + h
    assert threads_for_call(SMALL, 2, backlog=1, http_ms_per_text=0.5) == 1  # 1.75 < 1.9
    assert threads_for_call(SMALL, 2, backlog=31, http_ms_per_text=1.0) == 1  # 1.75 < 2.4
    assert threads_for_call(SMALL, 2, backlog=1, http_ms_per_text=0.2) == 2  # 1.6 < 1.75: HTTP work is light
    # the neobert shape: 71.75 against 42 + h
    assert threads_for_call(NEOBERT, 2, backlog=7, http_ms_per_text=1.0) == 2
    assert threads_for_call(NEOBERT, 2, backlog=7, http_ms_per_text=100.0) == 1  # HTTP-bound: 100 < 142


def test_threads_for_call_each_candidate_can_win_and_ties_take_fewer():
    four = ThreadChoice(4, "measured", {1: 40.0, 2: 22.0, 3: 16.0, 4: 14.0}, 4)  # 10, 5.5, 4, 3.5 ms a text
    assert threads_for_call(four, 4, backlog=1, http_ms_per_text=0.1) == 4  # 3.6 against 4 (3 threads)
    assert threads_for_call(four, 4, backlog=1, http_ms_per_text=1.0) == 3  # max(4, 1) = 4 < 4.5
    assert threads_for_call(four, 4, backlog=1, http_ms_per_text=5.0) == 3  # max(4, 5) = 5 < 5.5 (2 threads)
    # the HTTP side is the bottleneck: 2 and 3 threads both cost max(t, 6) = 6, and fewer threads win the tie
    assert threads_for_call(four, 4, backlog=1, http_ms_per_text=6.0) == 2
    assert threads_for_call(four, 4, backlog=1, http_ms_per_text=50.0) == 1  # every count: max(t, 50) = 50
    tie = ThreadChoice(2, "measured", {1: 8.0, 2: 4.0}, 2)  # 2 and 1 ms a text: h = 1 makes both 2 ms
    assert threads_for_call(tie, 2, backlog=1, http_ms_per_text=1.0) == 1
    assert (
        threads_for_call(SMALL, 2, backlog=1, http_ms_per_text=-1.0) == 2
    )  # a negative estimate counts as 0


def test_threads_for_call_pinned_shared_and_onnx_do_not_adapt(unpinned, monkeypatch):
    never = fake_probe({})
    pinned = choose_threads(2, never, cores=2)
    shared = choose_threads(0, never, cores=8, workers=3)
    monkeypatch.setattr(threads, "available_cores", lambda: 4)
    onnx = threads.fixed_threads(0, "ONNX Runtime")
    monkeypatch.setenv(THREADS_ENV, "1")
    env = choose_threads(0, never, cores=2)
    for choice, n in ((pinned, 2), (shared, 2), (onnx, 3), (env, 1)):
        assert not choice.adapts
        for backlog in (0, 1, 40):
            for h in (None, 0.0, 1.0, 1000.0):
                assert threads_for_call(choice, 2, backlog, h) == n
    assert SMALL.adapts and NEOBERT.adapts


def test_the_choice_crosses_the_process_boundary_inside_the_served_model():
    """The model process sends its ServedModel as it is (pickled, as worker.py sends it): the choice comes
    back whole, probe timings and cores included, and /info shows its count and reason."""
    import json
    import pickle
    from multiprocessing.reduction import ForkingPickler

    from neobert.serving.routes.status import InfoResponse
    from neobert.serving.served import ServedModel

    for choice in (SMALL, ThreadChoice(1, "pinned by --threads"), None):
        model = ServedModel(
            head="base",
            serves=("embed",),
            model_type="neobert",
            dimensions=8,
            max_input_tokens=16,
            backend="torch",
            precision="fp32",
            prompts={"query": "query: "},
            threads=choice,
        )
        back = pickle.loads(ForkingPickler.dumps(model))
        assert back == model and back.threads == choice
        info = json.loads(json.dumps(model.info()))  # plain JSON
        assert info["threads"] == (choice and choice.threads) and info["threads_reason"] == (
            choice and choice.reason
        )
        assert info["serves"] == ["embed"] and info["prompts"] == {"query": "query: "}
        assert set(info) <= set(InfoResponse.model_fields)
    assert pickle.loads(ForkingPickler.dumps(SMALL)).adapts and SMALL.timings_ms


def test_http_cost_from_a_sequence_of_updates():
    cost = HttpCost(alpha=0.2)
    assert cost.ms_per_text is None
    assert cost.update(0.004, 4) == pytest.approx(1.0)  # 4 ms over 4 texts
    assert cost.update(0.012, 4) == pytest.approx(1.4)  # (0.2 * 12 + 0.8 * 4) / 4
    # a call weighs by its texts: CPU and texts averaged alike, (0.2 * 8 + 0.8 * 5.6) / (0.2 * 8 + 0.8 * 4)
    assert cost.update(0.008, 8) == pytest.approx(6.08 / 4.8)
    assert cost.update(0.5, 0) == pytest.approx(6.08 / 4.8)  # no texts answered: nothing learned
    assert cost.update(-0.001, 4) == pytest.approx(0.8 * 6.08 / (0.2 * 4 + 0.8 * 4.8))  # clock noise: 0 CPU
    assert cost.updates == 5


def test_http_cost_counts_only_stretches_that_began_busy(monkeypatch):
    """The CPU between two answers counts only if requests were waiting at the first: the server's start
    and an idle stretch (here 3.5 s of CPU, the event loop's over a long quiet spell) are not charged to the
    next call's texts."""
    clock = iter([5.0, 5.5, 5.504, 5.512, 9.0, 9.003])
    monkeypatch.setattr(threads.time, "process_time", lambda: next(clock))
    policy = ThreadPolicy(SMALL, adaptive=True, measure_http=True)  # reads 5.0: the server's start
    policy.answered(1, waiting=3)  # began idle (the start): not counted; requests now wait
    assert policy.http_ms_per_text is None
    policy.answered(4, waiting=2)  # 4 ms over 4 texts
    assert policy.http_ms_per_text == pytest.approx(1.0)
    policy.answered(4, waiting=0)  # (0.2 * 8 + 0.8 * 4) / 4; the queue is empty now
    assert policy.http_ms_per_text == pytest.approx(1.2)
    policy.answered(1, waiting=1)  # 3.488 s of CPU since, over an idle stretch: not counted
    assert policy.http_ms_per_text == pytest.approx(1.2)
    policy.answered(3, waiting=0)  # busy again: (0.2 * 3 + 0.8 * 4.8) / (0.2 * 3 + 0.8 * 4)
    assert policy.http_ms_per_text == pytest.approx(4.44 / 3.8)
    assert policy.http_cost.updates == 3


class FixedCost(HttpCost):
    """An HTTP side whose CPU per text is known in advance."""

    def __init__(self, ms: float):
        super().__init__()
        self.fixed = ms

    def update(self, cpu_seconds: float, texts: int) -> float:
        return self.fixed

    @property
    def ms_per_text(self) -> float:
        return self.fixed


def fake_service(choice: ThreadChoice, **settings):
    """A Service over a fake model call that records the threads each call was sent, held until released."""
    import threading

    from neobert.serving import ServeConfig
    from neobert.serving.served import ServedModel
    from neobert.serving.service import Service

    sent, release, entered = [], threading.Event(), threading.Event()

    def call(key, texts, *threads):
        sent.append(threads)
        entered.set()
        release.wait(10)
        return [[0.0]] * len(texts), len(texts), {"long": 0, "truncated": 0}

    model = ServedModel(
        head="base",
        serves=("embed",),
        model_type="fake",
        dimensions=1,
        max_input_tokens=8,
        precision="fp32",
        backend=settings.pop("backend", "torch"),
        threads=choice,
    )
    service = Service(ServeConfig(model="fake", **settings), model, call)
    return service, sent, release, entered


def model_calls(service) -> dict[str, float]:
    """The service's model calls by placement, as its /metrics counts them (the bench's parser)."""
    from prometheus_client import generate_latest

    from neobert.benchmarks.serve import calls_by_placement

    return calls_by_placement(generate_latest(service.metrics.registry).decode())


def burst(service, release, entered, waiting: int = 3) -> None:
    """One call held while ``waiting`` requests queue behind it, then all answered."""
    first = service.submit(ModelCall.of("embed"), ["a"])
    assert entered.wait(10)
    rest = [service.submit(ModelCall.of("embed"), [f"t{i}"]) for i in range(waiting)]
    release.set()
    for future in (first, *rest):
        future.result(10)


def test_service_sends_each_call_its_count_from_the_backlog():
    """One request alone runs on the start-up choice; the three that queued behind it were taken with a
    backlog (2 others waiting) and run on one thread, the small preset's answer with h = 1 ms."""
    service, sent, release, entered = fake_service(SMALL)
    service.threads.http_cost = FixedCost(1.0)
    try:
        assert service.threads.adaptive and service.threads.cores == 2
        burst(service, release, entered)
        assert sent == [(2,), (1,)]  # the three waiting requests merged into one call
        assert model_calls(service) == {"2": 1.0, "1": 1.0}
        assert service.threads.state() == {
            "threads_under_load": 1,
            "runtime_under_load": None,
            "runtime_alone": None,
            "http_ms_per_text": 1.0,
        }
        assert "while requests wait, per call" in service.startup_line()
    finally:
        service.close(10)


def test_service_measures_its_cpu_per_text_while_requests_wait():
    """Calls answered with the queue empty start no measured stretch; the call after one answered while
    requests waited does."""
    service, sent, release, entered = fake_service(NEOBERT)
    try:
        assert service.threads.http_ms_per_text is None and service.threads.state()["threads_under_load"] == 2
        burst(service, release, entered)  # the held call is answered with 3 requests waiting
        assert service.threads.http_cost.updates == 1 and service.threads.http_ms_per_text >= 0
        for _ in range(3):
            service.submit(ModelCall.of("embed"), ["x"] * 4).result(10)
        assert service.threads.http_cost.updates == 1  # each began with nothing waiting
        assert sent[0] == (2,) and sent[-3:] == [(2,)] * 3  # no backlog: the start-up choice
    finally:
        service.close(10)


@pytest.mark.parametrize(
    "settings, why",
    [
        ({"threads": 2}, "pinned"),
        ({"workers": 2}, "several model processes"),
        ({"backend": "onnx"}, "onnx"),
        ({"model_process": False}, "in-process"),
    ],
)
def test_service_does_not_adapt_pinned_shared_onnx_or_in_process(settings, why):
    pinned = settings.get("threads")
    choice = ThreadChoice(2, "pinned by --threads") if pinned else SMALL
    service, sent, release, entered = fake_service(choice, **settings)
    if service.threads.http_cost is not None:
        service.threads.http_cost = FixedCost(1.0)
    try:
        assert not service.threads.adaptive, why
        burst(service, release, entered)
        assert all(threads == () for threads in sent)  # the call as before, no count sent
        assert service.threads.state()["threads_under_load"] == 2
        assert "while requests wait" not in service.startup_line()
    finally:
        service.close(10)
    assert (service.threads.http_cost is None) == (why == "in-process")


@pytest.mark.slow  # 9 s
def test_a_real_server_counts_its_calls_by_thread_count(unpinned, model_dir):
    """The model in its own process, the count measured at start (un-pinned; the child inherits it): after
    a burst of concurrent requests the per-thread-count metric holds every model call."""
    pytest.importorskip("fastapi")
    import threading

    from helpers import call
    from neobert.serving import ServeConfig
    from neobert.serving.server import BackgroundServer
    from neobert.serving.service import Service

    service = Service.load(ServeConfig(model=str(model_dir), precision="fp32"))
    errors = []

    def client(c: int) -> None:
        for i in range(4):
            status = call(srv.url, "POST", "/embed", {"texts": [f"text {c} {i}"] * (1 + i % 2)}, key=None)[0]
            if status != 200:
                errors.append(status)

    with BackgroundServer(service) as srv:
        clients = [threading.Thread(target=client, args=(c,)) for c in range(12)]
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join()
        metrics = call(srv.url, "GET", "/metrics", key=None)[1]
        info = call(srv.url, "GET", "/info", key=None)[1]
    assert errors == []
    counts = {
        int(line.split('"')[1]): float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith('neobert_model_calls_total{threads="')
    }
    batches = next(
        float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith("neobert_batch_requests_count ")
    )
    cores = threads.available_cores()
    assert counts and sum(counts.values()) == batches >= 4  # each client's requests follow each other
    assert set(counts) <= set(candidates(cores))
    assert info["http_ms_per_text"] is not None and info["http_ms_per_text"] >= 0  # measured after 2+ calls
    assert info["threads_under_load"] in candidates(cores)
    assert service.threads.adaptive == info["threads_reason"].startswith("measured at start")


def test_a_backlog_is_remembered_for_a_while_so_the_count_does_not_flap():
    from neobert.serving.threads import LoadMemory

    now = [100.0]
    memory = LoadMemory(hold=2.0, clock=lambda: now[0])
    assert memory.backlog(0) == 0  # never busy: the light-load count
    assert memory.backlog(3) == 3
    now[0] += 1.5
    assert memory.backlog(0) == 1  # the queue emptied a moment ago: still under load
    now[0] += 0.6
    assert memory.backlog(0) == 0  # empty for longer than the hold
    assert memory.backlog(1) == 1


def test_one_thread_policy_sets_torch_threads_in_one_place(unpinned):
    """torch.set_num_threads is called in serving by threads.set_threads only; ThreadPolicy.at_start sets the
    count it chose (pinned here; measured ones are forced above), and a backend's fixed count is pinned or
    all cores but one without measuring."""
    import ast
    from pathlib import Path
    from types import SimpleNamespace

    import torch

    serving = Path(threads.__file__).parent
    setters = sorted(
        f"{path.relative_to(serving)}:{node.lineno}"
        for path in serving.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and node.attr == "set_num_threads"
    )
    assert len(setters) == 1 and setters[0].startswith("threads.py:")
    before = torch.get_num_threads()
    try:
        config = SimpleNamespace(threads=1, workers=1, model_process=True)
        never = fake_probe({})  # a pinned count never probes
        assert (
            ThreadPolicy.at_start(config, never) == ThreadChoice(1, "pinned by --threads") and not never.calls
        )
        assert torch.get_num_threads() == 1
        unset = SimpleNamespace(threads=0, workers=1, model_process=True)
        fixed = ThreadPolicy.at_start(unset, fixed="a backend's reason")
        assert fixed.threads == max(1, threads.available_cores() - 1) and "a backend's reason" in fixed.reason
    finally:
        torch.set_num_threads(before)


# A pair (backend auto took an export and keeps PyTorch beside it), shaped on the emulated AVX-512 BF16 kind
# without AMX (docs/benchmarks.md): OpenVINO fp32 on one thread 1.75 ms a text, PyTorch 2.25 on one thread
# and 1.25 on both cores
PAIR = ThreadChoice(1, "measured", {1: 9.0, 2: 5.0}, 2, ExportPlacement("openvino fp32", 1, 7.0))


def test_a_pair_runs_on_its_export_without_a_backlog_and_on_the_cheapest_placement_under_one():
    assert PAIR.adapts and PAIR.start is None and SMALL.start == 2
    assert (PAIR.label(None), PAIR.label(2), SMALL.label(None)) == ("openvino fp32", "2", "unknown")
    assert threads_for_call(PAIR, 2, backlog=0, http_ms_per_text=0.3) is None  # one client: the export
    assert threads_for_call(PAIR, 2, backlog=5, http_ms_per_text=None) is None  # the HTTP side not measured
    # light HTTP work: PyTorch on both cores, 1.25 + 0.3 = 1.55, beats the export's max(1.75, 0.3)
    assert threads_for_call(PAIR, 2, backlog=7, http_ms_per_text=0.3) == 2
    # heavier: 1.25 + 1 = 2.25 against the export's 1.75 beside the HTTP side
    assert threads_for_call(PAIR, 2, backlog=7, http_ms_per_text=1.0) is None
    # HTTP-bound: the export and PyTorch's one thread both cost max(t, 3) = 3; the tie goes to the export
    assert threads_for_call(PAIR, 2, backlog=7, http_ms_per_text=3.0) is None
    slow_export = ThreadChoice(1, "measured", {1: 6.0, 2: 5.0}, 2, ExportPlacement("onnx fp32", 1, 8.0))
    assert threads_for_call(slow_export, 2, backlog=1, http_ms_per_text=1.0) == 1  # max(1.5, 1) < 2 < 2.25
    alone = ThreadChoice(1, "fixed", {}, 2, ExportPlacement("openvino fp32", 1, 7.0))  # nothing to switch to
    assert not alone.adapts and threads_for_call(alone, 2, backlog=9, http_ms_per_text=0.0) is None


def pair_probes(batch: dict, one: dict, export: tuple[float, float]):
    """A pair's probes (milliseconds): PyTorch's per count on the merged batch and on one text, and the
    export's on each; every call recorded as (option, texts)."""
    calls = []

    def torch_probe(n: int, texts: int) -> float:
        calls.append((n, texts))
        return (batch if texts == PROBE_TEXTS else one)[n] / 1e3

    def export_probe(texts: int) -> float:
        calls.append(("export", texts))
        return export[texts != PROBE_TEXTS] / 1e3

    return torch_probe, export_probe, calls


def test_choose_pair_times_the_export_in_the_same_rounds_as_pytorchs_counts(unpinned):
    torch_probe, export_probe, calls = pair_probes({1: 9.0, 2: 5.0}, {1: 3.0, 2: 2.5}, (7.0, 2.0))
    choice = choose_pair(torch_probe, export_probe, "openvino fp32", 1, "torch bf16", cores=2)
    assert choice.timings_ms == pytest.approx({1: 9.0, 2: 5.0}) and choice.cores == 2
    assert choice.export.label == "openvino fp32" and choice.export.ms == pytest.approx(7.0)
    assert (choice.threads, choice.export.threads, choice.export.pytorch) == (1, 1, "torch bf16")
    batch = (1, PROBE_TEXTS), (2, PROBE_TEXTS), ("export", PROBE_TEXTS)
    assert calls[:6] == [batch[0], batch[0], batch[1], batch[1], batch[2], batch[2]]  # each warmed up
    assert calls[6:9] == list(batch)  # then interleaved rounds
    assert calls[-3:] == [(1, 1), (2, 1), ("export", 1)]  # then one text, in rounds of its own
    assert "openvino fp32: 7.0 ms" in choice.reason and "torch bf16 on 2: 5.0 ms" in choice.reason
    # one text runs faster on the export: a call without a backlog runs there, as auto took it
    assert choice.export.lone is None and choice.start is None
    assert choice.one_text_ms == pytest.approx({1: 3.0, 2: 2.5}) and choice.export.one_ms == pytest.approx(
        2.0
    )
    assert "a call without a backlog on openvino fp32 (one text; openvino fp32: 2.0 ms" in choice.reason


def test_a_pairs_lone_call_runs_on_pytorch_only_where_one_text_runs_clearly_faster_there(unpinned):
    """Shaped on the 250M shape on a 2-core EPYC (docs/benchmarks.md): OpenVINO bf16 on one thread 110 ms for
    the merged batch and 37 on one text, PyTorch bf16 59 and 32 on both cores: a lone call runs on PyTorch's
    two threads. MiniLM there: the export 3.5 ms on one text against PyTorch's 4.5: it stays on the export."""
    torch_probe, export_probe, _ = pair_probes({1: 100.0, 2: 59.0}, {1: 49.0, 2: 32.0}, (110.0, 37.0))
    choice = choose_pair(torch_probe, export_probe, "openvino bf16", 1, "torch bf16", cores=2)
    assert choice.export.lone == 2 and choice.start == 2 and choice.adapts
    assert "a call without a backlog on torch bf16 on 2" in choice.reason
    assert threads_for_call(choice, 2, backlog=0, http_ms_per_text=0.3) == 2
    assert threads_for_call(choice, 2, backlog=4, http_ms_per_text=None) == 2  # HTTP side not measured yet
    assert lone_placement({1: 6.0, 2: 4.5}, 3.5) is None  # MiniLM: the export
    assert lone_placement({1: 6.0, 2: 3.4}, 3.5) is None  # 3% faster: within the margin, the export kept
    assert lone_placement({1: 3.3, 2: 3.3}, 3.5 * 1.05) == 1  # a tie between counts: the fewer threads


def test_a_pairs_call_under_load_is_costed_at_its_own_number_of_texts():
    """A call's fixed cost and cost per text through the probe's two points, one text and the merged batch:
    MiniLM's pair on a 2-core EPYC (docs/benchmarks.md), OpenVINO bf16 on one thread 3.4 ms for one text and
    9.9 for four, PyTorch bf16 4.3 and 6.7 on both cores, the HTTP side 0.75 ms a text. Calls of two or
    three texts run on the export; from four on (the probe's own batch), PyTorch's fixed cost is
    spread thin enough for it to win, on one thread beside the HTTP side (a tie with both cores at four goes
    to fewer threads). Without one-text timings (a PyTorch server's counts) the batch's share."""
    assert per_text(9.9, 3.4, 1) == pytest.approx(3.4) and per_text(9.9, 3.4, 4) == pytest.approx(9.9 / 4)
    assert per_text(9.9, 3.4, 8) == pytest.approx((3.4 + 7 * 6.5 / 3) / 8)  # the line, extended
    assert per_text(9.9, None, 1) == per_text(9.9, None, 8) == pytest.approx(9.9 / 4)
    assert per_text(3.0, 4.0, 2) == pytest.approx(
        2.0
    )  # a batch faster than one text (noise): no cost per text
    minilm = ThreadChoice(
        1,
        "measured",
        {1: 9.7, 2: 6.7},
        2,
        ExportPlacement("openvino bf16", 1, 9.9, "torch bf16", None, 3.4),
        {1: 6.0, 2: 4.3},
    )
    placed = {
        k: threads_for_call(minilm, 2, backlog=3, http_ms_per_text=0.75, texts=k) for k in (1, 2, 3, 4, 8)
    }
    assert placed == {1: None, 2: None, 3: None, 4: 1, 8: 1}
    assert threads_for_call(PAIR, 2, backlog=3, http_ms_per_text=0.3, texts=1) == 2  # no one-text timings


def test_service_places_a_pairs_calls_on_the_export_or_pytorch_by_the_backlog():
    """A pair in one model process of its own: a request alone runs on the export (no count sent); the
    three that queued behind it run on PyTorch's two threads where the HTTP work is light, and the metric
    and /info say where calls ran."""
    service, sent, release, entered = fake_service(PAIR, backend="openvino")
    service.threads.http_cost = FixedCost(0.3)
    try:
        assert service.threads.adaptive
        burst(service, release, entered)
        assert sent == [(None,), (2,)]
        assert model_calls(service) == {"openvino fp32": 1.0, "2": 1.0}
        assert service.threads.state() == {
            "threads_under_load": 2,
            "runtime_under_load": "torch fp32",
            "runtime_alone": "openvino fp32",
            "http_ms_per_text": 0.3,
        }
        service.threads.http_cost = FixedCost(1.0)
        assert service.threads.state()["runtime_under_load"] == "openvino fp32"
        assert service.threads.state()["threads_under_load"] == 1
        assert "openvino fp32 or PyTorch on a probed count" in service.startup_line()
    finally:
        service.close(10)
    lone = ThreadChoice(1, "measured", {1: 9.0, 2: 5.0}, 2, ExportPlacement("openvino bf16", 1, 7.0, lone=2))
    service, sent, release, entered = fake_service(lone, backend="openvino")
    try:
        burst(service, release, entered, waiting=0)  # one request alone: PyTorch's two threads, as probed
        assert sent == [(2,)] and service.threads.state()["runtime_alone"] == "torch fp32"
    finally:
        service.close(10)
    pinned, sent, release, entered = fake_service(PAIR, backend="openvino", workers=2)
    try:
        assert not pinned.threads.adaptive  # several model processes: no placement per call
        burst(pinned, release, entered)
        assert all(threads == () for threads in sent)
    finally:
        pinned.close(10)

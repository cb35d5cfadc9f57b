"""Fixtures shared by every test module."""

from __future__ import annotations

import pytest

from fakes import BagOfWordsEmbedder


def pytest_sessionstart(session):
    """On a clone where no data root holds the data (no $KGRAG_DATA_ROOT, no ../shared/data beside it),
    fetch what the tests read (the datasets gpu-paper's notebooks read: every small one) into the
    per-user data folder first, as `kgrag study` does; elsewhere nothing is fetched or written."""
    from kgrag_lib.errors import KgragError
    from kgrag_lib.paths import data_root_origin

    if data_root_origin() != "the per-user data folder":
        return
    from kgrag_lib.studies.data_needs import ensure_data

    try:
        ensure_data("gpu-paper")
    except KgragError as exc:
        print(f"kgrag tests: the real data could not be fetched ({exc}); the tests that read it will fail")


@pytest.fixture(autouse=True)
def _forget_held_secrets():
    """`redact` masks every key the process was given; a key one test gave is no other test's."""
    yield
    from kgrag_lib.redact import forget_secrets

    forget_secrets()


@pytest.fixture(autouse=True)
def _forget_engine_decision():
    """`run.engine: auto` is decided once per process; a test that fakes vLLM or a GPU decides for itself."""
    yield
    from kgrag_lib.llm.engine import forget

    forget()


@pytest.fixture
def fake_embedder() -> BagOfWordsEmbedder:
    """A fresh bag-of-words embedder (its call counters start at zero)."""
    return BagOfWordsEmbedder()


@pytest.fixture
def offline_parts(tmp_path, monkeypatch):
    """`kgrag run`, notebooks and runs load a scripted LLM (identity `scripted:<spec>`, cached in
    the run's cache folder) and the bag-of-words embedder instead of the real models."""
    import kgrag_lib.llm as llm_mod
    import kgrag_lib.retrieval as retrieval_mod
    from kgrag_lib.llm.cache import LLMCache
    from kgrag_lib.llm.fake import ScriptedLLM

    def fake_llm(spec, cache_path=None, **kw):
        answer = "Louis Malle" if "qwen" in spec else "Paris"
        return ScriptedLLM(lambda m, p: answer, identity=f"scripted:{spec}", cache=LLMCache(cache_path))

    monkeypatch.setattr(llm_mod, "load_llm", fake_llm)
    monkeypatch.setattr(retrieval_mod, "load_embedder", lambda spec, **kw: BagOfWordsEmbedder())
    monkeypatch.setenv("KGRAG_CACHE_DIR", str(tmp_path / "cache"))


METAQA_KB = """The Lovers|directed_by|Louis Malle
The Lovers|starred_actors|Jeanne Moreau
Zazie in the Metro|directed_by|Louis Malle
Elevator to the Gallows|starred_actors|Jeanne Moreau
"""
METAQA_QA = """who directed [The Lovers]\tLouis Malle
which movies did [Louis Malle] direct\tThe Lovers|Zazie in the Metro
who acted in [Elevator to the Gallows]\tJeanne Moreau
who directed [Zazie in the Metro]\tLouis Malle
"""


@pytest.fixture
def metaqa_root(tmp_path, monkeypatch):
    """A data root in MetaQA's real layout and formats (a 4-triple KB, 4 test questions), set
    as $KGRAG_DATA_ROOT."""
    root = tmp_path / "data"
    qa = root / "metaqa" / "1-hop" / "vanilla"
    qa.mkdir(parents=True)
    (root / "metaqa" / "kb.txt").write_text(METAQA_KB, encoding="utf-8")
    (qa / "qa_test.txt").write_text(METAQA_QA, encoding="utf-8")
    monkeypatch.setenv("KGRAG_DATA_ROOT", str(root))
    return root


@pytest.fixture(scope="session")
def shared_llm_cache(tmp_path_factory):
    """One LLM call cache for every real-model test of a session: tests that send the same
    requests (two builds of the same text KG, say) pay for them once."""
    return tmp_path_factory.mktemp("shared-llm") / "llm_cache.sqlite"


@pytest.fixture(scope="session")
def shared_embedder():
    """MiniLM (a run's default embedder), loaded once per test session for the real-model tests' run contexts
    (`RunContext(embedder=...)`), which would each load it on first use. Skipped where it is not installed."""
    from kgrag_lib.retrieval import load_embedder

    try:
        return load_embedder("minilm")
    except Exception as exc:  # the model packages are an optional extra
        pytest.skip(f"MiniLM unavailable: {type(exc).__name__}: {exc}")


@pytest.fixture(scope="session")
def shared_llm(shared_llm_cache):
    """The embedded 0.5B model in this process, over `shared_llm_cache`: loaded once per test session for the
    real-model tests that only send it requests (SA-RAG's, TCR-QF's, KG-Infused RAG's, Self-Ask's, the text
    index's and the DPO data's), not once per module; a request another test sent is answered from the cache. Skipped where the model packages (an optional extra) are missing."""
    from kgrag_lib.llm import load_llm

    try:
        llm = load_llm("qwen2.5-coder-0.5b-q4", cache_path=shared_llm_cache)
    except Exception as exc:  # the embedded model is an optional extra
        pytest.skip(f"embedded model unavailable: {exc}")
    try:
        yield llm
    finally:
        llm.close()


def _dpo_pair(q: str, good: str, bad: str) -> dict:
    return {"prompt": [{"role": "user", "content": q}], "chosen": [{"role": "assistant", "content": good}],
            "rejected": [{"role": "assistant", "content": bad}]}


@pytest.fixture(scope="session")
def dpo_trained(tmp_path_factory):
    """Notebook 27's CPU path (`train_dpo`, the cpu-smoke set) on the embedded model, once per test session: 2 LoRA
    steps on 4 pairs, the learning rate raised so that 2 steps move the answers. test_dpo_train merges and answers
    through it in process, test_vllm_lora serves its adapter through vLLM. Skipped where trl or the model is missing."""
    pytest.importorskip("trl")
    from kgrag_lib.llm.presets import PRESETS, resolve_gguf
    from kgrag_lib.train import dpo_train as dt

    try:
        resolve_gguf(PRESETS["qwen2.5-coder-0.5b-q4"])
    except Exception as exc:  # the embedded model is an optional extra
        pytest.skip(f"embedded model unavailable: {exc}")
    cfg = dt.dpo_config("cpu-smoke", max_steps=2, batch_size=1, gradient_accumulation_steps=2, max_length=128,
                        max_pairs=4, learning_rate=5e-3)
    pairs = [_dpo_pair("what is the capital of france", "Paris.", "I do not know, maybe Berlin or Rome."),
             _dpo_pair("who directed the film Jaws", "Steven Spielberg.", "It was a film about a shark."),
             _dpo_pair("what is the capital of spain", "Madrid.", "Spain is a country in Europe."),
             _dpo_pair("when was Craig Newmark born", "December 6, 1952.", "He founded craigslist.")]
    return dt.train_dpo(cfg, pairs, tmp_path_factory.mktemp("dpo") / "out", progress=False)


@pytest.fixture(scope="session")
def lcp_server(tmp_path_factory):
    """`python -m llama_cpp.server` on the embedded GGUF, alias `qwen`, on a free loopback port: one server per
    test session for every module that only sends it requests (test_llm_server, test_doctor_server), not one
    per module. Skipped where the server extra or the embedded model is missing."""
    import subprocess
    import sys

    from kgrag_lib.llm.managed_server import free_port
    from test_llm_server import _embedded_or_skip, _server_modules_or_skip, _wait_listed

    _server_modules_or_skip()
    path, _ = _embedded_or_skip()
    port = free_port()
    log = open(tmp_path_factory.mktemp("lcp") / "server.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(path), "--model_alias", "qwen",
                             "--n_ctx", "4096", "--host", "127.0.0.1", "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_listed(url, "qwen", proc)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()

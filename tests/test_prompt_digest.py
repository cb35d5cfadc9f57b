"""A run's identity includes the wording of its prompts (`methods.prompt_digest`): a resume after a
prompt was reworded is refused naming the module, a run from before digests were recorded resumes
with a warning and an honest manifest, and the KG build folders' manual prompt versions are pinned
to the wording they name."""

from __future__ import annotations

import ast
import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

from kgrag_lib.cli import main as kgrag
from kgrag_lib.methods import prompt_digest as pd
from kgrag_lib.methods.metaqa import prompts as metaqa_prompts
from kgrag_lib.methods.registry import PAPERS, available_methods, get_method
from kgrag_lib.runner import PROMPTS_KEY, check_resume, identity_diff, recorded_config

REPO = Path(__file__).resolve().parent.parent
METHODS_DIR = REPO / "kgrag_lib" / "methods"


# ------------------------------------------------------------------ the digest
def test_digest_is_stable_and_short():
    first = pd.prompt_digests(get_method("llm"))
    assert first == pd.prompt_digests(get_method("llm")) == {"metaqa.prompts": pd.module_digest("metaqa.prompts")}
    assert len(first["metaqa.prompts"]) == 12 and int(first["metaqa.prompts"], 16) >= 0


def test_digest_is_the_same_in_a_fresh_interpreter():
    """Not an artifact of one process (hash randomization, import order, set order)."""
    import subprocess

    code = ("from kgrag_lib.methods.prompt_digest import module_digest as d; "
            "print(d('sa_rag.prompts'), d('metaqa.prompts'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(REPO), "PYTHONHASHSEED": "123", "PATH": "/usr/bin:/bin"}).stdout.split()
    assert out == [pd.module_digest("sa_rag.prompts"), pd.module_digest("metaqa.prompts")]


@pytest.mark.parametrize("name, value", [
    ("ANSWER_SYSTEM", metaqa_prompts.ANSWER_SYSTEM + " Be brief."),      # a template
    ("END_MARKER", "<STOP>"),                                            # a short label
    ("DECOMPOSITION_EXAMPLES", metaqa_prompts.DECOMPOSITION_EXAMPLES[:2]),  # few-shot demonstrations
])
def test_digest_changes_when_a_constant_changes(monkeypatch, name, value):
    before = pd.module_digest("metaqa.prompts")
    monkeypatch.setattr(metaqa_prompts, name, value)
    assert pd.module_digest("metaqa.prompts") != before


def _module_from(tmp_path, monkeypatch, name: str, source: str):
    path = tmp_path / f"{name}.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, mod)
    spec.loader.exec_module(mod)
    return mod


BASE = '''"""Module doc {doc}."""
# a comment {doc}
import re
GREETING = "Hello {{name}}"  # trailing comment {doc}
FINAL = re.compile(r"answer:\\s*(.+)")
DEMOS = (("q1", "a1"), ("q2", "a2"))


def render(name: str, sep: "str" = "{sep}") -> str:
    """Function doc {doc}."""
    # inner comment {doc}
    return f"Question: {{name}}{literal}" + sep
'''


def test_docstrings_and_comments_do_not_count_but_literals_in_functions_do(tmp_path, monkeypatch):
    def digest(i, **kw):
        fields = {"doc": "one", "sep": "\\n", "literal": "\\nAnswer:", **kw}
        return pd.module_digest(_module_from(tmp_path, monkeypatch, f"prompt_mod_{i}", BASE.format(**fields)))

    base = digest(0)
    assert digest(1, doc="reworded entirely") == base               # docstrings and comments
    assert digest(2, literal="\\nReply:") != base                   # wording inside a helper
    assert digest(3, sep="; ") != base                              # a default argument's text


def test_each_method_records_its_own_prompt_modules():
    nor, self_ask, self_rag = (pd.prompt_digests(get_method(m)) for m in ("nor", "self-ask", "self-rag"))
    assert set(nor) == {"kg_infused.prompts"}
    assert set(self_ask) == {"kg_infused.prompts", "kg_infused.self_ask_prompts"}
    assert set(self_rag) == {"kg_infused.prompts", "kg_infused.self_rag_prompts"}
    assert set(pd.prompt_digests(get_method("tog"))) == {"tcr_qf.prompts"}
    assert set(pd.prompt_digests(get_method("ppr-rag"))) == {"sa_rag.prompts"}


def test_every_prompt_module_is_recorded_by_some_method_and_every_named_one_exists():
    """A new `*_prompts.py` is part of some method's identity; a spec names only real prompt modules."""
    on_disk = {f"{p.parent.name}.{p.stem}" for p in METHODS_DIR.glob("*/*.py") if pd.is_prompt_module(p.stem)}
    assert {m for paper in PAPERS for m in pd.paper_prompt_modules(paper)} == on_disk
    used = {m for spec in available_methods().values() for m in pd.method_prompt_modules(spec)}
    assert used == on_disk
    for spec in available_methods().values():
        for m in spec.prompts:
            assert pd.is_prompt_module(m) and m in on_disk, f"{spec.name}: {m}"


# ------------------------------------------------------------------ resuming a run
def run(out, *args):
    return kgrag(["run", "--dataset", "metaqa-1hop", "--out", str(out), "--no-progress", *args])


def manifest(out):
    return json.loads((Path(out) / "manifest.json").read_text())


def metrics(out):
    return json.loads((Path(out) / "metrics.json").read_text())


def test_the_manifest_records_the_digests(tmp_path, offline_parts, metaqa_root):
    assert run(tmp_path / "D", "--method", "llm") == 0
    assert manifest(tmp_path / "D")["config"][PROMPTS_KEY] == {"metaqa.prompts": pd.module_digest("metaqa.prompts")}


def test_a_resume_after_a_prompt_changed_is_refused_naming_the_module(tmp_path, offline_parts, metaqa_root,
                                                                       capsys, monkeypatch):
    out = tmp_path / "D"
    assert run(out, "--method", "llm") == 0
    old = pd.module_digest("metaqa.prompts")
    before = (out / "predictions.jsonl").read_text(), (out / "manifest.json").read_text()
    # reword a prompt the `llm` baseline does not send: the answers stay cached
    monkeypatch.setattr(metaqa_prompts, "SYNTHESIZE_SYSTEM", metaqa_prompts.SYNTHESIZE_SYSTEM + " Be brief.")
    new = pd.module_digest("metaqa.prompts")
    capsys.readouterr()
    assert run(out, "--method", "llm") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"prompts metaqa.prompts: {old} -> {new}" in err
    assert "LLM cache" in err and "--overwrite" in err
    assert ((out / "predictions.jsonl").read_text(), (out / "manifest.json").read_text()) == before
    # the remedy does what it says: every question answered again, no call sent for the unchanged prompt
    assert run(out, "--method", "llm", "--overwrite") == 0
    this = metrics(out)["this_run"]
    assert this["answered"] == 4 and this["llm_calls_sent"] == 0 and this["llm_cache_hits"] == 4
    assert manifest(out)["config"][PROMPTS_KEY] == {"metaqa.prompts": new}


def test_a_changed_prompt_that_the_method_sends_is_answered_anew(tmp_path, offline_parts, metaqa_root, monkeypatch):
    out = tmp_path / "D"
    assert run(out, "--method", "llm") == 0
    monkeypatch.setattr(metaqa_prompts, "ANSWER_SYSTEM", metaqa_prompts.ANSWER_SYSTEM + " Be brief.")
    assert run(out, "--method", "llm") == 2
    assert run(out, "--method", "llm", "--overwrite") == 0
    assert metrics(out)["this_run"]["llm_calls_sent"] == 4


def _make_legacy(out: Path) -> None:
    """What a manifest written before prompt digests were recorded looks like."""
    man = manifest(out)
    del man["config"][PROMPTS_KEY]
    (out / "manifest.json").write_text(json.dumps(man), encoding="utf-8")


def test_a_run_from_before_digests_resumes_with_a_warning_and_an_honest_manifest(tmp_path, offline_parts,
                                                                                  metaqa_root, capsys):
    out = tmp_path / "D"
    assert run(out, "--method", "llm") == 0
    _make_legacy(out)
    pred = out / "predictions.jsonl"
    pred.write_text("".join(pred.read_text().splitlines(keepends=True)[:2]))   # as a run killed halfway left it
    capsys.readouterr()
    assert run(out, "--method", "llm") == 0                     # 2 kept, 2 more answered
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if "predates recorded prompt digests" in line]
    assert len(warnings) == 1 and "holds 2 predictions" in warnings[0] and "--overwrite" in warnings[0]
    assert metrics(out)["this_run"]["reused"] == 2 and metrics(out)["this_run"]["answered"] == 2
    # the old predictions are not claimed for today's wording, on this resume or the next
    assert manifest(out)["config"][PROMPTS_KEY] is None and "resumed_from" in manifest(out)
    assert run(out, "--method", "llm") == 0
    assert "predates recorded prompt digests" in capsys.readouterr().err
    assert manifest(out)["config"][PROMPTS_KEY] is None
    # starting afresh records the digests again, and says nothing
    assert run(out, "--method", "llm", "--overwrite") == 0
    assert "predates" not in capsys.readouterr().err
    assert manifest(out)["config"][PROMPTS_KEY] == {"metaqa.prompts": pd.module_digest("metaqa.prompts")}


def test_an_empty_folder_from_before_digests_records_them(tmp_path, offline_parts, metaqa_root, capsys):
    """Nothing stored, nothing unknown: no warning, and the digests are recorded."""
    out = tmp_path / "D"
    assert run(out, "--method", "llm") == 0
    _make_legacy(out)
    (out / "predictions.jsonl").write_text("", encoding="utf-8")
    capsys.readouterr()
    assert run(out, "--method", "llm") == 0
    assert "predates" not in capsys.readouterr().err
    assert isinstance(manifest(out)["config"][PROMPTS_KEY], dict)


def test_a_committed_reference_run_resumes_with_the_warning(tmp_path, capsys):
    """The reference runs predate digests: resuming one is allowed, said, and recorded as unknown."""
    src = next(p.parent for p in sorted((REPO / "results" / "reference").rglob("manifest.json"))
               if "method" in (json.loads(p.read_text(encoding="utf-8"))["config"].get("run") or {}))
    out = tmp_path / "ref"
    shutil.copytree(src, out)
    stored = manifest(out)["config"]
    assert PROMPTS_KEY not in stored
    wanted = {**stored, PROMPTS_KEY: {"metaqa.prompts": "0" * 12}}
    assert identity_diff(stored, wanted) == []
    prev = check_resume(out, wanted, 3, overwrite=False)
    assert prev is not None and "predates recorded prompt digests" in capsys.readouterr().err
    assert recorded_config(prev, wanted, 3)[PROMPTS_KEY] is None
    assert recorded_config(prev, wanted, 0) is wanted


def test_identity_diff_of_prompts():
    base = {"run": {"method": "llm"}, PROMPTS_KEY: {"a.prompts": "111111111111", "b.prompts": "222222222222"}}
    assert identity_diff(base, base) == []
    other = {**base, PROMPTS_KEY: {"a.prompts": "333333333333"}}
    assert identity_diff(base, other) == ["prompts a.prompts: 111111111111 -> 333333333333",
                                          "prompts b.prompts: 222222222222 -> <absent>"]
    assert identity_diff({"run": {"method": "llm"}}, base) == []     # unknown wording is warned about, not diffed
    assert identity_diff({**base, PROMPTS_KEY: None}, base) == []


# ------------------------------------------------------------------ KG build folders' manual versions
def _imported_from_prompts(importer: str) -> list[str]:
    """The names `methods/<importer>.py` takes from its paper's prompts module: the extraction's entry points."""
    tree = ast.parse((METHODS_DIR / f"{importer}.py").read_text(encoding="utf-8"))
    return sorted(a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "prompts"
                  and n.level == 1 for a in n.names)


# (prompts module, the module whose KG builds it feeds, version constant): (version, digest of the wording
# the extraction reaches, version constant left out). Change the wording -> bump the version and the pin.
EXTRACTION_PINS = {
    ("sa_rag.prompts", "sa_rag/extraction", "EXTRACTION_PROMPT_VERSION"): ("tkg4", "131d4f9d8a35"),
    ("tcr_qf.prompts", "tcr_qf/extraction", "RECORDS_PROMPT_VERSION"): ("tcr2", "819108d4b24d"),
}


def extraction_digest(module: str, importer: str, version: str) -> str:
    entries = _imported_from_prompts(importer)
    assert version in entries, f"{importer}.py no longer imports {version} from {module}"
    return pd.closure_digest(module, entries, exclude=[version])


@pytest.mark.parametrize("key", EXTRACTION_PINS, ids=lambda k: k[0])
def test_kg_extraction_wording_is_pinned_to_its_version(key):
    module, importer, version = key
    pinned_version, pinned_digest = EXTRACTION_PINS[key]
    current = getattr(pd._module(module), version)
    digest = extraction_digest(module, importer, version)
    where = f"kgrag_lib/methods/{module.replace('.', '/')}.py"
    assert (current, digest) == (pinned_version, pinned_digest), (
        f"the KG extraction prompts of {where} now digest to {digest!r} with {version} = {current!r}, but "
        f"{pinned_digest!r} is pinned to {pinned_version!r}. KG build folders are named by {version}: after "
        f"changing the extraction wording, bump {version} (so builds with the old wording are not reused) and "
        f"update EXTRACTION_PINS in tests/test_prompt_digest.py to ({current!r} -> new version, {digest!r})")


def test_the_pin_sees_extraction_wording_and_only_that(monkeypatch):
    from kgrag_lib.methods.sa_rag import prompts as sa

    key = ("sa_rag.prompts", "sa_rag/extraction", "EXTRACTION_PROMPT_VERSION")
    before = extraction_digest(*key)
    monkeypatch.setattr(sa, "ANSWER", sa.ANSWER + " Be brief.")            # an answer prompt: not the KG's
    assert extraction_digest(*key) == before
    monkeypatch.setattr(sa, "_ENTITY_RULES", sa._ENTITY_RULES + " Be brief.")  # reached through entity_messages
    assert extraction_digest(*key) != before

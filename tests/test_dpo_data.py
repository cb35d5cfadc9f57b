"""DPO data of KG-Infused RAG's augmentation stage (§3.7, App. E) with a scripted LLM, a tiny KG and
corpus, and 2Wiki question files in the real format: exclusion of evaluated questions, the six
candidates, judge verdicts and drop counts, trl's conversational form, Table 19 statistics,
resume (skip, refuse other settings, repair after a kill). The last test runs the real small
model on real 2Wiki data (marker `model`)."""

from __future__ import annotations

import json

import pytest

from _kg_infused_helpers import PASSAGES, cue, stage_responder, tiny_store
from fakes import BagOfWordsEmbedder
from kgrag_lib.data.registry import load_questions
from kgrag_lib.errors import ConfigError
from kgrag_lib.llm.base import SamplingParams
from kgrag_lib.llm.cache import LLMCache
from kgrag_lib.llm.fake import ScriptedLLM
from kgrag_lib.methods.base import RunContext
from kgrag_lib.methods.kg_infused import make_method
from kgrag_lib.methods.kg_infused.corpus import CorpusIndex
from kgrag_lib.methods.kg_infused.kg_sources import KGSource, seed_candidates
from kgrag_lib.records import Question
from kgrag_lib.retrieval import DenseIndex
from kgrag_lib.runner import StaleRunError
from kgrag_lib.train import dpo_data

KGI = {"kg": "tiny-kg", "corpus": "tiny-corpus", "k_p": 4, "max_tokens": 100}

# One question per judge outcome; the marker word in each question text picks the scripted behaviour.
BEHAVIOURS = {
    "w1": ("Where was the director of film Taxi! born?", "pair"),
    "w2": ("Who directed Taxi! TIE and when did he die?", "tie"),
    "w3": ("Where was the GARBLE director of Taxi! born?", "unparsable_verdict"),
    "w4": ("Who was the SAME spouse of the director of Taxi!?", "identical_candidates"),
    "w5": ("Where was OUTOFRANGE James Cagney born?", "invalid_verdict"),
}


def write_questions(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([{"_id": q, "question": t, "answer": "x"} for q, t in rows]), encoding="utf-8")


def data_root_with(tmp_path, dev4000, corpus354=(), dev200=()):
    root = tmp_path / "data"
    write_questions(root / "2wiki" / "lag_2wiki_dev_4000_nocontext.json", dev4000)
    write_questions(root / "2wiki" / "DERIVED_lag_dev_questions_with_gold_titles_in_HippoRAG_corpus_354.json",
                    corpus354)
    write_questions(root / "2wiki" / "MIGRES_200_2wiki.jsonl", dev200)
    return root


def responder(fail_on: str | None = None):
    """Pipeline stages as in the KG-Infused tests; candidates that differ per decoding setting
    (the same text for every setting on a SAME question); verdicts by the question's marker."""
    base = stage_responder()

    def respond(messages, params):
        prompt = messages[-1]["content"]
        if fail_on and fail_on in prompt:
            raise RuntimeError("simulated crash")
        if "Rewritten versions:" in prompt:
            if "TIE" in prompt:
                return '{"best_id": 2, "worst_id": 2}'
            if "GARBLE" in prompt:
                return "They all read well to me."
            if "OUTOFRANGE" in prompt:
                return '{"best_id": 9, "worst_id": 1}'
            return '```json\n{"best_id": 2, "worst_id": 1}\n```'
        if cue(messages) == "Improved passage:":
            if "SAME" in prompt:
                return "Roy Del Ruth directed Taxi!.  "
            return f"Taxi! was directed by Roy Del Ruth (t={params.temperature}, p={params.top_p})."
        return base(messages, params)

    return respond


class Setup:
    def __init__(self, tmp_path, rows=None, fail_on=None, **dev):
        rows = rows if rows is not None else [(q, t) for q, (t, _) in BEHAVIOURS.items()]
        self.root = data_root_with(tmp_path, rows, **dev)
        store = tiny_store()
        self.emb = BagOfWordsEmbedder()
        ids, texts = seed_candidates(store)
        self.kg = KGSource("tiny-kg", store, ids, DenseIndex.build(self.emb.encode(texts)))
        self.corpus = CorpusIndex("tiny-corpus", PASSAGES, DenseIndex.build(self.emb.encode([p.as_text() for p in PASSAGES])))
        self.cache = LLMCache(tmp_path / "llm.sqlite")
        self.tmp = tmp_path
        self.new_llm(fail_on)

    def new_llm(self, fail_on=None):
        self.llm = ScriptedLLM(responder(fail_on), name="scripted-gen", cache=self.cache)
        self.ctx = RunContext(model="scripted-gen", data_root=str(self.root), cache_dir=str(self.tmp),
                              llm=self.llm, embedder=self.emb)
        return self.llm

    def cfg(self, **kw):
        return dpo_data.make_dpo_config({"n_questions": 5, "exclude_profiles": [], "kg_infused": KGI}, kw)

    def build(self, cfg=None, out="dpo", **kw):
        return dpo_data.build_dpo_data(cfg or self.cfg(), self.ctx, self.tmp / out, progress=False,
                                kg_source=self.kg, corpus_loader=lambda name: self.corpus, **kw)


@pytest.fixture
def s(tmp_path):
    setup = Setup(tmp_path)
    yield setup
    setup.cache.close()


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# ---- settings ------------------------------------------------------------------------------------
def test_defaults_are_the_papers_and_bad_settings_name_the_parameter():
    cfg = dpo_data.make_dpo_config()
    assert cfg.decodings == [[0.0, 1.0], [0.3, 0.95], [0.5, 0.9], [0.7, 0.9], [0.9, 0.8], [1.0, 0.7]]
    assert cfg.rounds == [1, 2] and cfg.judge is None
    for bad, name in [({"rounds": []}, "rounds"), ({"rounds": [1, 1]}, "rounds"), ({"rounds": [0]}, "rounds"),
                      ({"decodings": [[0.5, 1.5]]}, "decodings"), ({"decodings": [[0.1, 0.9], [0.1, 0.9]]}, "decodings"),
                      ({"decodings": [[0.5]]}, "decodings"), ({"split": "train"}, "split"),
                      ({"n_questions": 0}, "n_questions"), ({"length_unit": "chars"}, "length_unit"),
                      ({"kg_infused": {"rounds": 3}}, "rounds"), ({"kg_infused": {"top_k": 3}}, "top_k"),
                      ({"kg_infused": {"k_p": 0}}, "k_p"), ({"judge": ""}, "judge"), ({"max_tokens": 0}, "max_tokens")]:
        with pytest.raises(ConfigError, match=name):
            dpo_data.make_dpo_config(bad)
    with pytest.raises(ConfigError, match="n_questions"):
        dpo_data.make_dpo_config({"n_questions": "ten"})
    with pytest.raises(ConfigError, match="unknown parameter 'temperature'"):
        dpo_data.make_dpo_config({"temperature": 0.3})


# ---- exclusion ----------------------------------------------------------------------------------
def test_evaluated_questions_are_excluded_exactly(tmp_path):
    dev4000 = [(f"d{i:02d}", f"Question number {i} about Taxi!?") for i in range(30)]
    corpus354 = dev4000[:12]
    dev200 = [dev4000[20], dev4000[21], ("x1", "Another?"), ("x2", "Yet another?"), ("x3", "More?")]
    root = data_root_with(tmp_path, dev4000, corpus354, dev200)
    prof = tmp_path / "eval.yaml"
    prof.write_text("name: eval\nrun:\n  n: 2\n  seed: 0\nnotebooks:\n  21_kg_infused_main:\n    n: 3\n    seed: 1\n",
                    encoding="utf-8")
    res = tmp_path / "results" / "runs" / "x"
    res.mkdir(parents=True)
    (res / "predictions.jsonl").write_text(
        json.dumps({"qid": "d25", "dataset": "2wiki", "prediction": "", "answers": []}) + "\n"
        + json.dumps({"qid": "d26", "dataset": "hotpotqa", "prediction": "", "answers": []}) + "\n"
        + '{"qid": "d27", "datas', encoding="utf-8")
    ex = dpo_data.evaluated_qids([str(prof)], [str(tmp_path / "results")], root)

    # each (split, n, seed) draw is made as load_questions makes it (a smaller n is not a prefix)
    def draw(split, n, seed):
        return {q.qid for q in load_questions("2wiki", split=split, n=n, seed=seed, root=root)}

    expected = draw("corpus354", 2, 0) | draw("corpus354", 3, 1) | draw("dev200", 2, 0) | {"d25"}
    assert ex.qids == expected and ex.missing_splits == []
    assert {"profile eval: run", "profile eval: notebook 21_kg_infused_main",
            "profile eval: notebook 40_tcr_qf_kg_construction"} <= {x["source"] for x in ex.samples}
    assert any(x["split"] == "dev200" for x in ex.samples)  # SA-RAG / TCR-QF draw 2Wiki from dev200
    assert str(res / "predictions.jsonl") in ex.result_files

    cfg = dpo_data.make_dpo_config({"n_questions": 100, "exclude_profiles": [str(prof)],
                             "exclude_results": [str(tmp_path / "results")]})
    qs, counts = dpo_data.sample_questions(cfg, ex, root)
    in_pool = expected & {q for q, _ in dev4000}
    assert counts == {"pool": 30, "excluded_evaluated": len(in_pool), "available": 30 - len(in_pool)}
    assert len(qs) == 30 - len(in_pool) and not {q.qid for q in qs} & expected
    # a seeded draw: same seed, same order; another seed, another order
    assert [q.qid for q in dpo_data.sample_questions(cfg, ex, root)[0]] == [q.qid for q in qs]
    cfg.seed = 1
    assert [q.qid for q in dpo_data.sample_questions(cfg, ex, root)[0]] != [q.qid for q in qs]
    # a split whose every question is evaluated is refused with the way out
    cfg.split = "corpus354"
    with pytest.raises(ConfigError, match="split.*dev4000"):
        dpo_data.sample_questions(cfg, dpo_data.Exclusion(qids={q for q, _ in corpus354}), root)
    with pytest.raises(ConfigError, match="exclude_results"):
        dpo_data.evaluated_qids([], [str(tmp_path / "nowhere")], root)


def test_shipped_profiles_are_the_default_exclusion(tmp_path):
    """With the shipped profiles, every 2Wiki draw of every notebook counts; split files absent
    from a data root are reported (nothing can have been evaluated from them there)."""
    root = data_root_with(tmp_path, [(f"d{i}", f"Q {i}?") for i in range(8)], [("d0", "Q 0?"), ("d1", "Q 1?")])
    (root / "2wiki" / "MIGRES_200_2wiki.jsonl").unlink()
    ex = dpo_data.evaluated_qids(None, [], root)
    assert ex.qids == {"d0", "d1"} and ex.missing_splits == ["dev200"]
    assert {x["source"].split(":")[0] for x in ex.samples} >= {"profile cpu-smoke", "profile gpu-paper"}


# ---- the build ------------------------------------------------------------------------------------
def test_build_candidates_verdicts_pairs_and_stats(s):
    data = s.build()
    # six candidates per input, each with exactly the paper's decoding settings and the fixed seed
    aug = [r for r in s.llm.requests if cue(r.messages) == "Improved passage:"]
    assert len(aug) == 5 * 2 * 6
    first = [r.params for r in aug[:6]]
    assert len({json.dumps(r.messages) for r in aug[:6]}) == 1
    assert first == [SamplingParams(max_tokens=100, temperature=t, top_p=p, seed=0) for t, p in dpo_data.PAPER_DECODINGS]
    # the judge: temperature 0, its JSON constrained to the ids shown
    judged = [r for r in s.llm.requests if "Rewritten versions:" in r.prompt]
    assert len(judged) == 4 * 2   # the SAME question's inputs are never judged
    schema = json.loads(judged[0].params.json_schema)
    assert schema["properties"]["best_id"]["enum"] == [1, 2, 3, 4, 5, 6] and judged[0].params.temperature == 0

    # drops counted by reason, per round; pairs only from a clear verdict
    assert data.drops == {"identical_candidates": 2, "tie": 2, "unparsable_verdict": 2, "invalid_verdict": 2,
                          "stage_error": 0}
    pairs = read_jsonl(data.pairs_path)
    assert len(pairs) == 2 == data.n_pairs and {p["qid"] for p in pairs} == {"w1"} and {p["round"] for p in pairs} == {1, 2}
    records = {r["qid"]: r for r in read_jsonl(data.questions_path)}
    assert set(records) == set(BEHAVIOURS)
    for qid, (_, outcome) in BEHAVIOURS.items():
        assert [i["status"] for i in records[qid]["inputs"]] == [outcome, outcome]
    same = records["w4"]["inputs"][0]
    assert same["n_distinct"] == 1 and len(same["candidates"][0]["decodings"]) == 6

    # trl's conversational form: the prompt is the augmentation request exactly as sent
    p = pairs[0]
    sent = [r for r in aug if "Where was the director of film Taxi! born?" in r.prompt]
    assert p["prompt"] in [r.messages for r in sent] and p["prompt"][0]["role"] == "user"
    assert p["chosen"][0]["role"] == p["rejected"][0]["role"] == "assistant"
    assert p["chosen"][0]["content"] != p["rejected"][0]["content"]
    inp = records["w1"]["inputs"][p["round"] - 1]
    shown = inp["shown_order"]               # the judge named ids 2 (best) and 1 (worst) of the shown order
    assert p["chosen_decodings"] == [shown[1]] and p["rejected_decodings"] == [shown[0]]
    assert f"t={shown[1][0]}, p={shown[1][1]}" in p["chosen"][0]["content"]
    assert p["judge"] == "scripted-gen" == p["generator"] and records["w1"]["judge"] == "scripted-gen"

    ds = data.dataset()
    assert ds.column_names == ["prompt", "chosen", "rejected"] and len(ds) == 2
    assert ds[0]["prompt"] == pairs[0]["prompt"]
    from datasets import load_dataset

    raw = load_dataset("json", data_files=str(data.pairs_path), split="train")
    assert len(raw) == 2 and {"qid", "round", "chosen_decodings", "judge"} <= set(raw.column_names)
    trl_utils = pytest.importorskip("trl.data_utils")
    assert trl_utils.is_conversational(ds[0])

    # Table 19's layout, written beside the JSONL
    df = data.stats
    assert list(df.columns) == ["D_KA^1", "D_KA^2", "D_KA"]
    assert df.loc["pairs"].tolist() == [1, 1, 2] and df.loc["inputs"].tolist() == [5, 5, 10]
    assert df.loc["questions", "D_KA"] == 5 and df.loc["dropped: tie"].tolist() == [1, 1, 2]
    assert df.loc["pairs (paper, LLaMA3.1-8B)"].tolist() == [1449, 1460, 2909]
    assert df.loc["pairs (paper, Qwen2.5-7B)"].tolist() == [1202, 1259, 2461]
    n_tok = s.llm.count_tokens(p["chosen"][0]["content"])
    assert df.loc["avg chosen tokens", f"D_KA^{p['round']}"] == n_tok
    import pandas as pd

    assert pd.read_csv(data.stats_csv, index_col=0).loc["pairs", "D_KA"] == 2
    stats = json.loads(data.stats_json.read_text())
    assert stats["drops"] == data.drops and stats["table19"]["pairs"]["D_KA"] == 2
    assert stats["judge"] == "scripted-gen" and "estimated" in stats["lengths_counted_as"]
    assert stats["pool"] == 5 and stats["excluded_evaluated"] == 0 and stats["duplicate_candidates_merged"] == 10
    man = json.loads(data.manifest_path.read_text())
    assert man["config"]["qids"] == [q.qid for q in dpo_data.sample_questions(s.cfg(), dpo_data.Exclusion(), s.root)[0]]
    assert man["config"]["judge"]["name"] == "scripted-gen" and "git" in man and "versions" in man


def test_greedy_candidate_is_the_evaluation_runs_request(s):
    """The stages run as in KGInfusedRAG.answer: after the build, an evaluation run of the same
    question sends nothing for the stages up to the augmentation (all cache hits)."""
    s.build(s.cfg(rounds=[1]))
    q = Question("w1", BEHAVIOURS["w1"][0], ["Philadelphia"], dataset="2wiki")
    before = len(s.llm.requests)
    method = make_method("kg-infused", s.ctx, {**KGI, "rounds": 1}, seed=0, kg_source=s.kg,
                         corpus_loader=lambda n: s.corpus)
    pred = method.answer(q)
    assert [cue(r.messages) for r in s.llm.requests[before:]] == ["Answer:"]
    assert pred.trace["augmented_note"].startswith("Taxi! was directed by Roy Del Ruth (t=0.0, p=1.0)")


def test_separate_judge_is_recorded_and_words_unit(tmp_path):
    s = Setup(tmp_path, rows=[("w1", BEHAVIOURS["w1"][0])])
    judge = ScriptedLLM(lambda m, p: '{"best_id": 1, "worst_id": 3}', name="judge-model", cache=s.cache)
    data = s.build(s.cfg(n_questions=1, rounds=[2], length_unit="words"), judge_llm=judge)
    assert not [r for r in s.llm.requests if "Rewritten versions:" in r.prompt]
    assert len(judge.requests) == 1 and judge.requests[0].params.max_tokens == 64
    pairs = read_jsonl(data.pairs_path)
    assert len(pairs) == 1 and pairs[0]["judge"] == "judge-model" and pairs[0]["generator"] == "scripted-gen"
    assert list(data.stats.columns) == ["D_KA^2", "D_KA"] and data.summary["judge"] == "judge-model"
    assert data.stats.loc["avg chosen words", "D_KA"] == len(pairs[0]["chosen"][0]["content"].split())
    assert json.loads(data.manifest_path.read_text())["config"]["judge"]["name"] == "judge-model"
    s.cache.close()


def test_config_from_profile_matches_the_profiles_kg_infused_runs():
    cfg, ctx = dpo_data.config_from_profile("cpu-smoke", n_questions=3)
    assert cfg.n_questions == 3 and cfg.seed == 0 and ctx.model == "qwen2.5-coder-0.5b-q4"
    assert cfg.kg_infused["max_tokens"] == 160 and "rounds" not in cfg.kg_infused
    assert cfg.kg_infused_config(2).answer_max_tokens == 32 and ctx.loaded_llm is None   # nothing loaded
    with pytest.raises(ConfigError, match="rounds"):
        dpo_data.config_from_profile("cpu-smoke", rounds=[])


def test_parse_verdict_forms():
    ids = [1, 2, 3]
    assert dpo_data.parse_verdict('{"best_id": 1, "worst_id": 3}', ids) == ("ok", 1, 3)
    assert dpo_data.parse_verdict('Sure! ```json\n{"best_id": "2", "worst_id": 3.0}\n```', ids) == ("ok", 2, 3)
    assert dpo_data.parse_verdict('[{"best_id": 1, "worst_id": 2}]', ids) == ("ok", 1, 2)
    assert dpo_data.parse_verdict('{"best_id": 2, "worst_id": 2}', ids)[0] == "tie"
    assert dpo_data.parse_verdict('{"best_id": 4, "worst_id": 2}', ids)[0] == "invalid_verdict"
    assert dpo_data.parse_verdict('{"best": 1, "worst": 2}', ids)[0] == "unparsable_verdict"
    assert dpo_data.parse_verdict('{"best_id": true, "worst_id": 2}', ids)[0] == "unparsable_verdict"
    assert dpo_data.parse_verdict("", ids)[0] == "unparsable_verdict"


# ---- resume -------------------------------------------------------------------------------------
def test_resume_skips_finished_questions_without_llm_requests(s):
    first = s.build()
    llm = s.new_llm()
    again = s.build()
    assert llm.usage.requests == 0 and llm.requests == []
    assert again.summary["this_run"]["built"] == 0 and again.summary["this_run"]["reused"] == 5
    assert read_jsonl(again.pairs_path) == read_jsonl(first.pairs_path)
    assert again.stats.equals(first.stats)
    assert "resumed_from" in json.loads(again.manifest_path.read_text())


def test_resume_after_the_judge_prompt_changed_is_refused(s, monkeypatch):
    from kgrag_lib.methods.prompt_digest import module_digest
    from kgrag_lib.train import judge_prompts

    s.build(s.cfg(n_questions=2))
    old = module_digest("train.judge_prompts")
    monkeypatch.setattr(judge_prompts, "JUDGE", judge_prompts.JUDGE + " Be strict.")
    new = module_digest("train.judge_prompts")
    with pytest.raises(StaleRunError, match=rf"prompts train.judge_prompts: {old} -> {new}.*LLM cache"):
        s.build(s.cfg(n_questions=2))
    fresh = s.build(s.cfg(n_questions=2), overwrite=True)
    assert json.loads(fresh.manifest_path.read_text())["config"]["prompts"]["train.judge_prompts"] != old


def test_resume_with_other_settings_is_refused(s):
    s.build(s.cfg(n_questions=2))
    before = s.tmp.joinpath("dpo", "pairs.jsonl").read_bytes()
    with pytest.raises(StaleRunError, match=r"other settings \(dpo\.judge_max_tokens: 64 -> 32\).*overwrite=True"):
        s.build(s.cfg(n_questions=2, judge_max_tokens=32))
    with pytest.raises(StaleRunError, match="qids: another question sample"):
        s.build(s.cfg(n_questions=3))
    with pytest.raises(StaleRunError, match="kg_infused.k_p: 4 -> 2"):
        s.build(s.cfg(n_questions=2, kg_infused={**KGI, "k_p": 2}))
    assert s.tmp.joinpath("dpo", "pairs.jsonl").read_bytes() == before
    fresh = s.build(s.cfg(n_questions=2, judge_max_tokens=32), overwrite=True)
    assert fresh.summary["this_run"]["built"] == 2


def test_a_crash_mid_build_leaves_readable_files_and_resume_repairs(tmp_path):
    s = Setup(tmp_path)
    order = [q.qid for q in dpo_data.sample_questions(s.cfg(), dpo_data.Exclusion(), s.root)[0]]
    second = BEHAVIOURS[order[1]][0]
    s.new_llm(fail_on=second)
    with pytest.raises(RuntimeError, match="simulated crash"):
        s.build()
    pairs_path = tmp_path / "dpo" / "pairs.jsonl"
    done = read_jsonl(tmp_path / "dpo" / "questions.jsonl")
    assert [r["qid"] for r in done] == order[:1]
    # the pairs file holds complete lines only, and datasets reads it as it is
    assert all(p["qid"] == order[0] for p in read_jsonl(pairs_path))
    from datasets import load_dataset

    if read_jsonl(pairs_path):
        assert len(load_dataset("json", data_files=str(pairs_path), split="train")) == len(read_jsonl(pairs_path))
    # a kill in the middle of a write: the torn last line is skipped by the loader, removed on resume
    with open(pairs_path, "a", encoding="utf-8") as fh:
        fh.write('{"prompt": [{"role": "user", "content": "Improve')
    assert len(dpo_data.load_dpo_dataset(pairs_path)) == len(read_jsonl_lenient(pairs_path))
    llm = s.new_llm()
    data = s.build()
    assert not [r for r in llm.requests if BEHAVIOURS[order[0]][0] in r.prompt]   # finished question not redone
    assert data.n_pairs == 2 and len(read_jsonl(pairs_path)) == 2
    assert [r["qid"] for r in read_jsonl(tmp_path / "dpo" / "questions.jsonl")] == order
    s.cache.close()


def read_jsonl_lenient(path):
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def test_a_stage_error_drops_the_input_and_the_build_goes_on(tmp_path):
    from kgrag_lib.llm.base import PromptTooLongError

    s = Setup(tmp_path)
    inner = responder()

    def too_long(messages, params):
        if cue(messages) == "Improved passage:" and "GARBLE" in messages[-1]["content"]:
            raise PromptTooLongError("prompt of 9000 tokens does not fit n_ctx 4096")
        return inner(messages, params)

    s.llm = ScriptedLLM(too_long, name="scripted-gen", cache=s.cache)
    s.ctx.llm = s.llm
    data = s.build()
    assert data.drops["stage_error"] == 2 and data.n_pairs == 2
    rec = {r["qid"]: r for r in read_jsonl(data.questions_path)}["w3"]
    assert "PromptTooLongError" in rec["inputs"][0]["error"]
    s.cache.close()


def test_loader_refuses_a_file_that_is_not_pairs(tmp_path):
    bad = tmp_path / "pairs.jsonl"
    bad.write_text('{"text": "hello"}\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="prompt, chosen, rejected"):
        dpo_data.load_dpo_dataset(bad)
    with pytest.raises(Exception, match="no DPO pairs file"):
        dpo_data.load_dpo_dataset(tmp_path / "missing")


# ---- the real small model ------------------------------------------------------------------------
@pytest.mark.model
def test_real_model_builds_pairs_or_counts_drops(tmp_path_factory, request):
    """One non-evaluated real 2Wiki question, one round, the real held-out KG and corpus (MiniLM),
    Qwen2.5-Coder-0.5B as generator and judge, short budgets: the build either yields a pair in
    trl's form or records why the input was dropped."""
    from kgrag_lib.paths import data_root

    root = data_root()
    if not (root / "2wiki" / "lag_2wiki_dev_4000_nocontext.json").exists():
        pytest.skip(f"real 2Wiki files not under the data root {root}")
    llm = request.getfixturevalue("shared_llm")   # the session's one load (conftest.py), after the data check
    ctx = RunContext(model="qwen2.5-coder-0.5b-q4", llm=llm, embedder=request.getfixturevalue("shared_embedder"))
    cfg = dpo_data.make_dpo_config({"n_questions": 1, "rounds": [1], "max_tokens": 48, "judge_max_tokens": 32,
                             "kg_infused": {"k_p": 2, "max_tokens": 32, "query_max_tokens": 20,
                                            "max_triples_per_entity": 10}})
    out = tmp_path_factory.mktemp("dpo")
    data = dpo_data.build_dpo_data(cfg, ctx, out, progress=False)
    evaluated = dpo_data.evaluated_qids(None, [], root).qids
    rec = read_jsonl(data.questions_path)
    assert len(rec) == 1 and rec[0]["qid"] not in evaluated and len(rec[0]["inputs"]) == 1
    inp = rec[0]["inputs"][0]
    assert inp["status"] in ("pair", *dpo_data.DROP_REASONS)
    assert data.summary["inputs"] == 1 and data.n_pairs + sum(data.drops.values()) == 1
    if inp["status"] != "stage_error":
        assert inp["note"] and inp["n_candidates"] == 6 and 1 <= inp["n_distinct"] + len(inp["empty_candidates"]) <= 6
    if data.n_pairs:
        ds = data.dataset()
        assert ds.column_names == ["prompt", "chosen", "rejected"] and ds[0]["chosen"][0]["content"].strip()
        assert data.stats.loc["pairs", "D_KA"] == 1 and data.stats.loc["avg prompt tokens", "D_KA"] > 20
    assert json.loads(data.stats_json.read_text())["judge"] == llm.name


def test_table19_counts_a_pair_repeated_across_rounds_once_in_the_union():
    """When round 2 adds no triple, its augmentation input and pair repeat round 1's: D_KA as a
    set holds that pair once (the 'distinct pairs' row), the 'pairs' row counts both."""
    from kgrag_lib.train.dpo_data import table19

    msgs = [{"role": "user", "content": "improve this"}]
    pair = {"prompt": msgs, "chosen": [{"role": "assistant", "content": "good"}],
            "rejected": [{"role": "assistant", "content": "bad"}]}
    other = {**pair, "chosen": [{"role": "assistant", "content": "better"}]}
    pairs = [{**pair, "round": 1}, {**pair, "round": 2}, {**other, "round": 2}]
    records = [{"qid": "q1", "inputs": [{"round": 1, "status": "pair"}, {"round": 2, "status": "pair"}]},
               {"qid": "q2", "inputs": [{"round": 2, "status": "pair"}]}]
    df = table19(records, pairs, [1, 2], lambda s: len(s.split()), "words")
    assert list(df.loc["pairs"]) == [1, 2, 3]
    assert list(df.loc["distinct pairs"]) == [1, 2, 2]
    assert list(df.loc["questions"]) == [1, 2, 2] and df.loc["inputs", "D_KA"] == 3


def test_a_server_with_requests_in_flight_builds_the_same_files(tmp_path):
    """Questions, their six decodings and the judge calls go out together to a server backend;
    the files come out in the sample's order, as from one request at a time."""
    one, many = Setup(tmp_path / "one"), Setup(tmp_path / "many")
    many.llm.concurrent_requests, many.llm.default_concurrency = True, 4
    try:
        a, b = one.build(), many.build()
        assert a.n_pairs == b.n_pairs > 0
        for name in (dpo_data.PAIRS_FILE, dpo_data.QUESTIONS_FILE):
            assert read_jsonl(a.out_dir / name) == read_jsonl(b.out_dir / name)
        assert len(many.llm.requests) == len(one.llm.requests)
    finally:
        one.cache.close()
        many.cache.close()

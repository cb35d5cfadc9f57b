"""The probe matrix of "a run never lies": one row per probe a careful or adversarial user tried,
the outcome we promise, and the test that holds it. Read it as a table; the test below only
checks that every row still names a test that exists, so the table cannot drift from the suite.

Outcomes: "refused" = exit 2 and one line naming the file, parameter or URL and what to do;
"correct" = the right result; "kept" = nothing existing is replaced or lost."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

# probe, what happens now, where it is tested (file::test)
PROBES = [
    # wrong results with exit 0
    ("sweep rerun with another --profile", "its own cell (identity hashed)",
     "test_sweep.py::test_another_profile_is_another_combination_even_under_the_same_name"),
    ("sweep values sharing a 150-char prefix, or '/' vs '-'", "own folders",
     "test_sweep.py::test_values_sharing_a_long_prefix_or_differing_in_slashes_get_their_own_folders"),
    ("sweep with a misspelt parameter (-p hopz)", "refused before any run",
     "test_sweep.py::test_bad_sweeps_are_refused_before_anything_runs"),
    ("two questions with one id; a null or empty question", "refused naming both records",
     "test_data_formats.py::test_two_questions_under_one_id_or_a_question_without_text_are_refused"),
    ("kb.txt edited within the same second and size", "a new KG build (content hash)",
     "test_kg_sources.py::test_an_edit_keeping_size_and_mtime_gets_a_new_build"),
    ("NaN in an embedding row outside any sample", "named and recomputed (every row checked)",
     "test_cache_damage.py::test_damaged_embedding_file_is_named_and_recomputed"),
    ("in-range garbage or out-of-range ids in a built KG", "refused (given folder) / rebuilt (cache)",
     "test_kg_store.py::test_a_damaged_saved_store_is_refused_in_one_line_naming_the_file"),
    ("a damaged build in the KG cache", "named and rebuilt",
     "test_kg_sources.py::test_a_damaged_build_in_the_cache_is_named_and_rebuilt_a_damaged_given_folder_refused"),
    ("--dataset hotpotqa on a 2Wiki file, bamboogle on HotpotQA", "refused naming the file's dataset",
     "test_data_real.py::test_a_file_of_another_dataset_is_refused_naming_it"),
    ("--seed -1", "refused", "test_bad_inputs.py::test_a_negative_seed_is_refused_naming_the_parameter"),
    ("HTTP 503 forever with --request-retries 50", "each wait capped, all bounded, a line per retry",
     "test_llm_openai.py::test_a_server_failing_forever_is_given_up_on_within_a_bounded_wait_saying_each_retry"),
    ("--executor ray --address 127.0.0.1:1 (nothing listens)", "refused within seconds",
     "test_bad_inputs.py::test_a_ray_address_where_nothing_listens_is_refused_at_once"),
    ("--overwrite --concurrency 0 on a finished run", "refused; the run kept",
     "test_runner.py::test_overwrite_with_a_bad_setting_refuses_before_discarding_the_finished_run"),
    ("data refresh-manifest on a full disk", "the old manifest kept whole",
     "test_runner.py::test_the_data_manifest_is_replaced_whole_or_not_at_all"),
    ("a sweep re-run with other values", "sweep.csv/md list every finished cell of the folder",
     "test_sweep.py::test_a_rerun_with_other_values_keeps_the_earlier_cells_in_the_table"),
    ("two cache export --parts into one folder at once", "each its own whole part",
     "test_cache_damage.py::test_two_part_exports_into_one_folder_at_once_get_their_own_parts"),
    ("?code=SECRET (Azure style), a password holding '@'", "sent, written and printed nowhere",
     "test_bad_inputs.py::test_a_token_in_the_server_url_reaches_the_server_but_no_file_and_no_output"),
    ("a 401 body echoing the Authorization header; an API key ending in CR", "no key printed or written",
     "test_bad_inputs.py::test_a_server_echoing_the_key_in_its_401_and_a_key_ending_in_cr_print_no_key"),
    ("doctor --server with user:password and ?api_key=", "reached as a run would, nothing secret printed",
     "test_doctor.py::test_doctor_reads_a_server_url_with_credentials_as_a_run_does_and_prints_none_of_them"),
    ("any unexpected exception in a kgrag command", "one line and a log file with the traceback (exit 3)",
     "test_cli_fuzz.py::test_the_guard_turns_an_unexpected_exception_into_one_line_and_a_log"),
    ("fuzzed arguments and input files (deep nesting, BOM, NUL, surrogates, huge numbers, bad paths)",
     "an answer or a one-line refusal, never an internal error",
     "test_cli_fuzz.py::test_no_argument_or_input_file_gives_a_traceback"),
    ("--model '' (an unset $MODEL); --set top_k=010 / 0x10 / 1_000", "refused in one line",
     "test_bad_inputs.py::test_silent_surprises_on_the_command_line_are_refused"),
    ("a profile with a key twice (a second methods:)", "refused naming the line",
     "test_bad_inputs.py::test_a_profile_with_a_key_twice_is_refused_naming_the_line"),
    ("kgrag study --only ''", "refused", "test_bad_inputs.py::test_study_only_with_an_empty_prefix_is_refused"),
    ("sweep -p a 1 -p a 2; -p x 010; -p x .nan", "refused; refused; NaN is a value",
     "test_sweep.py::test_a_parameter_given_twice_and_an_ambiguous_number_are_refused_but_nan_is_a_value"),
    ("a UTF-8 BOM before question 1; a NUL byte past the first 8 KiB", "dropped; refused naming the line",
     "test_data_formats.py::test_a_bom_is_dropped_and_a_nul_past_the_head_is_refused_naming_its_line"),
    ("a qid twice in predictions.jsonl; a question without gold", "refused naming both lines; the score's "
     "n_<metric> recorded and said", "test_runner.py::test_a_qid_twice_in_predictions_is_refused_and_a_question_"
     "without_gold_is_said"),
    ("a relative KGRAG_CACHE_DIR under kgrag sweep / study", "made absolute where kgrag started: one cache",
     "test_bad_inputs.py::test_relative_paths_in_the_environment_are_made_absolute_before_any_kernel_starts"),
    ("one question holding a lone surrogate (\\ud800)", "that question recorded failed, the run goes on",
     "test_runner.py::test_a_question_with_a_lone_surrogate_fails_alone_and_the_run_goes_on"),
    ("--request-timeout inf; --set temperature=1e-3", "refused naming the bound; read as 0.001",
     "test_bad_inputs.py::test_an_infinite_timeout_is_refused_and_an_exponent_without_a_dot_is_a_number"),
    ("a misspelt key in a parent profile", "reported against the parent's file",
     "test_profile_extends.py::test_a_misspelt_key_in_a_parent_profile_is_reported_against_the_parent"),
    ("a gzip body that cannot be decoded", "said as such, not as 'cannot reach the server'",
     "test_llm_openai.py::test_a_body_that_cannot_be_decoded_is_not_called_unreachable"),
    ("GET /models stalls", "the message names the limit that applied (15 s), not 60 s",
     "test_llm_openai.py::test_the_models_probe_says_the_limit_it_waited"),
    ("usage tokens of 10**30 or -1 in a reply or an imported cache row", "counted as unreported; the row refused",
     "test_cache_damage.py::test_absurd_token_counts_neither_crash_a_run_nor_enter_the_cache"),
    ("two sweeps into one folder at once", "the second refused naming the first's process",
     "test_sweep.py::test_a_second_sweep_into_a_folder_being_written_is_refused"),
    ("--qa-file ./qa.txt, then by its absolute path", "one run (the path resolved)",
     "test_bad_inputs.py::test_one_question_file_by_a_relative_and_an_absolute_path_is_one_run"),
    ("00_quickstart with -p method llm", "runs (hops/top_k only to methods that read triples)",
     "test_reader_outputs.py::test_quickstart_runs_every_method_its_parameters_cell_offers"),
    ("the API key in the environment through a study, a sweep and cache export/check", "in no file, printed nowhere",
     "test_reader_outputs.py::test_a_study_a_sweep_and_the_cache_commands_write_and_print_no_api_key"),
    ("kgrag doctor when nvidia-smi exits 3, or prints a warning line", "MISSING with its message; only "
     "'<name>, <n> MiB' lines are GPUs", "test_doctor.py::test_a_failing_nvidia_smi_is_no_gpu_and_a_garbage_line_is_no_gpu"),
    ("train dpo --plan-only on a GGUF preset; --gpus 0", "the GGUF's metadata read, nothing dequantized; refused",
     "test_dpo_train.py::test_plan_only_reads_a_ggufs_metadata_and_refuses_zero_gpus"),
    ("--seed 4294967295 (llama.cpp's 'random seed')", "refused: seeds are at most 2**31 - 1",
     "test_bad_inputs.py::test_a_seed_llama_cpp_reads_as_random_is_refused"),
    ("a server trickling one byte every few seconds, --request-timeout 1", "cut at the timeout, saying so",
     "test_llm_openai.py::test_a_server_that_trickles_is_cut_at_the_request_timeout"),
    ("429 with Retry-After", "waits what it asks", "test_llm_openai.py::test_a_429_waits_what_its_retry_after_asks"),
    ("a question file edited under the same qids, then resumed", "refused naming the questions; --overwrite "
     "answers those again", "test_runner.py::test_an_edited_question_is_not_resumed_with_its_old_answer_and_gold"),
    # data lost without --overwrite
    ("kg build --out onto an existing folder or file", "kept; refused without --overwrite",
     "test_kg_cli.py::test_build_never_replaces_an_existing_folder_or_file_without_overwrite"),
    ("cache export X --cache X; export over a file", "kept; refused without --overwrite",
     "test_cache_damage.py::test_export_never_replaces_the_cache_or_an_existing_file_without_overwrite"),
    ("study --profile some/dir/cpu-smoke.yaml", "results/ and figures/ of its own (stem + content hash)",
     "test_studies.py::test_a_profile_file_of_the_users_gets_its_own_results_and_figures_folders"),
    ("--out naming an existing file", "refused, the file kept",
     "test_bad_inputs.py::test_an_output_folder_that_is_a_file_is_refused"),
    # security
    ("a sweep parameter name that is code", "refused before any run",
     "test_sweep.py::test_bad_sweeps_are_refused_before_anything_runs"),
    ("a token in an openai: URL (userinfo or ?api_key=)", "sent to the server, written and printed nowhere",
     "test_bad_inputs.py::test_a_token_in_the_server_url_reaches_the_server_but_no_file_and_no_output"),
    ("a failed connection or DNS lookup to a URL with a token", "refused without the token",
     "test_bad_inputs.py::test_an_unreachable_server_is_named_without_its_token"),
    ("a token in a swept model spec or in kgrag study --model", "refused (it would be written for the notebooks); "
     "$KGRAG_OPENAI_API_KEY carries it", "test_sweep.py::test_a_token_in_a_swept_value_is_refused_before_anything_runs_"
     "and_summaries_never_hold_one"),
    ("kgrag study --model with a token", "refused before the profile is written",
     "test_concurrency.py::test_study_overrides_make_one_checked_profile_for_every_notebook"),
    ("a YAML alias bomb in a profile", "refused when read",
     "test_config.py::test_an_alias_bomb_is_refused_and_ordinary_aliases_pass"),
    ("--cache-dir and the assembled model", "the model and its hashes go there too",
     "test_llm_assets.py::test_a_runs_cache_dir_also_holds_the_assembled_model_and_its_hashes"),
    # hangs and crashes
    ("a server that accepts and never answers", "ends within --request-timeout, saying so",
     "test_bad_inputs.py::test_a_stalled_server_fails_within_the_request_timeout_saying_so"),
    ("a full disk while embedding (was SIGBUS)", "one OSError naming the file, nothing left behind",
     "test_cache_damage.py::test_a_full_disk_while_embedding_is_one_oserror_naming_the_file"),
    ("a kill during the triple embedding (was: restart from zero)", "resumes at its last finished block",
     "test_cache_damage.py::test_a_killed_embedding_resumes_at_its_last_finished_block"),
    ("a kill during a TCR-QF run", "resume replays the KG, repeats no call",
     "test_tcr_qf.py::test_kill_drill_tcr_qf_resume_replays_the_kg_and_repeats_no_call"),
    # tracebacks
    ("a full or read-only disk under --out", "refused naming predictions.jsonl; resumes once freed",
     "test_jsonl.py::test_a_full_disk_ends_the_run_in_one_line_naming_the_file_and_the_run_resumes"),
    ("a full or read-only LLM cache", "refused naming the cache file",
     "test_cache_damage.py::test_a_read_only_or_full_llm_cache_ends_the_run_in_one_line_naming_it"),
    ("a server answering invalid JSON, HTML, a list /models, non-UTF-8", "refused naming the URL",
     "test_bad_inputs.py::test_a_bad_server_reply"),
    ("a server answering bad usage, int or dict content", "0 tokens / that question recorded failed",
     "test_bad_inputs.py::test_a_bad_server_reply"),
    ("cache import of a line that is no object", "refused naming file and line",
     "test_cache_damage.py::test_importing_an_export_whose_line_is_no_object_is_one_line_naming_it"),
    ("a YAML-invalid or !!python-tagged sweep value", "refused before any run",
     "test_sweep.py::test_bad_sweeps_are_refused_before_anything_runs"),
    ("kgrag sweep of a file that is not a notebook (text, JSON, gzip, deep nesting)", "refused naming it",
     "test_sweep.py::test_a_file_that_is_no_notebook_is_refused_naming_it"),
    ("cache check/export/show/import on a read-only cache", "that cache named, the default untouched",
     "test_cache_damage.py::test_cache_commands_on_a_read_only_cache_name_that_cache_never_the_default"),
    ("fuzzed kgrag sweep arguments and input files", "no traceback, no internal error",
     "test_cli_fuzz.py::test_no_sweep_argument_or_input_gives_a_traceback"),
    # issue 59: server arguments, server specs
    ("?args=[--api-key,sk-X] on llama-server:/vllm-serve: (manifest, run lock, server log)", "sent, written nowhere",
     "test_server_args.py::test_an_api_key_in_server_args_reaches_the_server_but_no_file_and_no_output"),
    ("vllm-serve:/nonexistent?args=[--api-key,sk-X]", "refused, no key printed",
     "test_server_args.py::test_a_failing_spec_with_a_key_in_its_args_prints_no_key"),
    ("kgrag study --model 'llama-server:...?args=[--api-key,sk-X]'", "refused; profile.yaml not written",
     "test_server_args.py::test_a_study_refuses_a_key_in_server_args_instead_of_writing_it_into_its_profile"),
    ("an API key of 3 characters echoed by a 401", "masked", "test_server_args.py::test_a_short_key_echoed_by_a_401_is_not_printed"),
    ("llama-server:/llamacpp-server: ?args=[--host,0.0.0.0] or [--port=1]", "refused naming the flag",
     "test_server_args.py::test_a_llama_server_may_not_be_moved_off_loopback_or_its_port"),
    ("vllm-serve: ?args=[--served_model_name,x] / [--port=1] / an argparse prefix", "refused naming the flag",
     "test_server_args.py::test_vllm_refuses_its_owned_flags_in_every_spelling"),
    ("?max_num_seqs=010; ?gpu_memory_utilization=1e-9", "refused (ambiguous); a float, range-checked",
     "test_server_args.py::test_spec_option_numbers_are_read_as_written"),
    ("a spec option given twice", "refused", "test_server_args.py::test_an_option_given_twice_is_refused"),
    ("data fetch of a URL with user:password@ and ?token=", "fetched (Basic auth), neither printed",
     "test_data_fetch.py::test_a_url_with_user_password_and_a_token_is_fetched_but_neither_is_printed"),
    ("a manifest path ../../x or /abs/x under data fetch", "refused naming the entry, nothing written",
     "test_data_fetch.py::test_a_manifest_path_outside_the_data_root_is_refused_naming_the_entry"),
    ("run --show-config --set temperature=1.5; a generator spec with user:password@", "the value set; masked",
     "test_bad_inputs.py::test_show_config_honours_set_and_the_flags_and_masks_a_token"),
    ("reference_run.sh --commit --every -1|abc|0|010", "refused before anything runs",
     "test_rehearse_script.py::test_reference_run_refuses_an_every_that_would_stop_or_spin_its_checkpoints"),
    ("rehearse_gpu.py --every -1|0|nan|inf", "refused before anything is built",
     "test_rehearse_script.py::test_every_must_be_a_positive_finite_number_of_minutes"),
    ("report.publish on a scratch copy outside the checkout", "the checkout's README untouched",
     "test_study_report.py::test_rebuilding_a_folder_outside_the_checkout_never_rewrites_the_checkout_readme"),
    ("report.publish with a questions.jsonl cut in half, doubled or edited", "refused naming the file",
     "test_study_report.py::test_a_damaged_questions_file_is_refused_naming_it"),
    ("report.publish --profile bogus-profile", "refused",
     "test_study_report.py::test_rebuild_refuses_a_profile_it_does_not_know_or_that_the_report_does_not_name"),
    ("a passage store whose offsets go down inside their range", "refused naming the file (rebuilt in the cache)",
     "test_passage_store.py::test_offsets_damaged_inside_their_range_are_refused_when_opened"),
    ("report.publish with a summary.json of numbers; findings quoting a missing sibling", "refused in one line",
     "test_study_report.py::test_rebuild_refuses_a_summary_of_non_objects_and_a_missing_sibling_in_one_line"),
]


def _tests_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


@pytest.mark.parametrize("probe, outcome, where", PROBES, ids=[p[0][:60] for p in PROBES])
def test_every_probe_names_a_test_that_exists(probe, outcome, where):
    file, name = where.split("::")
    assert name in _tests_in(TESTS / file), f"{probe!r}: {where} is gone"

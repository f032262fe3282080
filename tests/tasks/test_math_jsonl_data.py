"""``math_jsonl`` on a user's data (issue 47 item 2): verl's Parquet with dotted keys, a
``save_to_disk`` directory, column mapping, a prompt template, several eval files as sources, a
custom reward seeing every column, and the per-source eval metrics."""
import builtins
import json
import pathlib
import types

import numpy as np
import pytest

pytest.importorskip("tokenizers")

from prs.models import hf  # noqa: E402
from prs.rewards.custom import RewardConfig  # noqa: E402
from prs.tasks import math_jsonl, tables  # noqa: E402
from prs.tasks.math_jsonl import SHIPPED, tokenizer_texts  # noqa: E402

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "own_setup"
SHIPPED_ROWS = [json.loads(x) for x in SHIPPED.read_text().splitlines() if x.strip()]
VERL = dict(problem_key="prompt", answer_key="reward_model.ground_truth")
MINE = dict(problem_key="question", answer_key="final")


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_qwen3")
    hf.make_tiny_checkpoint(path, seed=0, texts=tokenizer_texts())
    return path


def test_verl_parquet_through_dotted_keys():
    """tests/data/own_setup/verl_test.parquet holds shipped rows 12..19 in verl's layout."""
    pytest.importorskip("pyarrow")
    rows = math_jsonl.load_rows(str(DATA / "verl_test.parquet"), **VERL)
    assert [r["answer"] for r in rows] == [r["answer"] for r in SHIPPED_ROWS[12:20]]
    assert [r["source"] for r in rows] == ["tiny_math"] * 5 + ["tiny_algebra"] * 3  # the data_source column
    assert rows[0]["problem"] == [{"role": "user", "content": SHIPPED_ROWS[12]["problem"] + " Let's think step by "
                                   "step and output the final answer within \\boxed{}."}]
    assert rows[3]["columns"]["extra_info"] == {"split": "test", "index": 3} and rows[3]["where"] == "verl_test.parquet row 3"
    with pytest.raises(ValueError, match=r"source_key='nope'"):
        math_jsonl.load_rows(str(DATA / "verl_test.parquet"), source_key="nope", **VERL)


def test_save_to_disk_directory_equals_the_parquet(tmp_path):
    datasets = pytest.importorskip("datasets")
    want = math_jsonl.load_rows(str(DATA / "verl_test.parquet"), **VERL)
    datasets.Dataset.from_list([r["columns"] for r in want]).save_to_disk(str(tmp_path / "saved"))
    got = math_jsonl.load_rows(str(tmp_path / "saved"), **VERL)
    assert [(r["problem"], r["answer"], r["source"], r["columns"]) for r in got] == \
        [(r["problem"], r["answer"], r["source"], r["columns"]) for r in want]
    datasets.DatasetDict({"test": datasets.Dataset.from_list([r["columns"] for r in want])}).save_to_disk(
        str(tmp_path / "dd"))
    assert len(math_jsonl.load_rows(str(tmp_path / "dd"), split="test", **VERL)) == 8
    with pytest.raises(ValueError, match=r"splits \['test'\], not split='train'"):
        math_jsonl.load_rows(str(tmp_path / "dd"), **VERL)


def test_offline_and_missing_package_errors(monkeypatch):
    with pytest.raises(ValueError, match="not in the local Hugging Face cache.*offline"):
        math_jsonl.load_rows("nobody-here/no-such-dataset-xyz")
    with pytest.raises(ValueError, match="does not exist"):
        math_jsonl.load_rows("absent.parquet")
    real = builtins.__import__

    def no_pyarrow(name, *a, **k):
        if name.startswith("pyarrow"):
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    with pytest.raises(ValueError, match=r"needs the pyarrow package: pip install -e '.\[data\]'") as e:
        tables.load_table(str(DATA / "verl_test.parquet"))
    assert "\n" not in str(e.value)


def test_chat_list_prompts_render_as_given(ckpt):
    task = math_jsonl.make_math_jsonl(tokenizer=str(ckpt), path=str(DATA / "verl_test.parquet"),
                                      eval_path=str(DATA / "verl_test.parquet"), **VERL)
    row = task.eval_rows[0]
    assert task.prompt_text(row["problem"], row) == task.tokenizer.apply_chat_template(
        row["problem"], add_generation_prompt=True, enable_thinking=False)
    with pytest.raises(ValueError, match="every prompt of the data is a chat list"):
        math_jsonl.make_math_jsonl(tokenizer=str(ckpt), path=str(DATA / "verl_test.parquet"),
                                   prompt_template="{problem}", **VERL)


def test_prompt_template_and_column_mapping(ckpt):
    template = "{problem}\nLevel {level}. Put the answer in \\boxed{{}}."
    task = math_jsonl.make_math_jsonl(tokenizer=str(ckpt), path=str(DATA / "problems.jsonl"),
                                      eval_path=str(DATA / "problems.jsonl"), prompt_template=template, **MINE)
    raw = [json.loads(x) for x in (DATA / "problems.jsonl").read_text().splitlines()]
    for row, r in zip(task.eval_rows, raw):
        assert row["answer"] == r["final"] and row["source"] == "problems"
        want = task.tokenizer.apply_chat_template(
            [{"role": "user", "content": f"{r['question']}\nLevel {r['level']}. Put the answer in \\boxed{{}}."}],
            add_generation_prompt=True, enable_thinking=False)
        assert task.prompt_text(row["problem"], row) == want
    with pytest.raises(ValueError, match=r"names 'grade' but the row has the columns \['final', 'level', 'question'\]"):
        math_jsonl.make_math_jsonl(tokenizer=str(ckpt), path=str(DATA / "problems.jsonl"),
                                   prompt_template="{problem} {grade}", **MINE)
    with pytest.raises(ValueError, match="instruction or prompt_template, not both"):
        math_jsonl.make_math_jsonl(tokenizer=str(ckpt), prompt_template="{problem}", instruction="Think.")


def _episodes(task, probs, responses, rewards):
    """Stand-in eval ``Episodes``: prompt then response tokens, ``policy_mask`` on the response."""
    prompt, plen = task.prompts(probs)
    n = len(responses) // len(plen)
    ids = [task.tokenizer.encode(r) + [task.eos_id] for r in responses]
    width = prompt.shape[1] + max(map(len, ids))
    tokens = np.full((len(ids), width), task.pad_id, np.int32)
    mask = np.zeros((len(ids), width), bool)
    for r, x in enumerate(ids):
        p = plen[r // n]
        tokens[r, :p] = prompt[r // n, :p]
        tokens[r, p:p + len(x)] = x
        mask[r, p:p + len(x)] = True
    return types.SimpleNamespace(tokens=tokens, policy_mask=mask, rewards=np.asarray(rewards, np.float32),
                                 lengths=(tokens != task.pad_id).sum(1))


def test_several_eval_files_are_sources_and_metrics_split_by_them(ckpt):
    task = math_jsonl.make_math_jsonl(tokenizer=str(ckpt), eval_path=[str(SHIPPED), str(SHIPPED)], max_rows=3,
                                      backend="fallback")
    assert [r["source"] for r in task.eval_rows] == ["math_tiny"] * 6  # max_rows applies to each eval file
    # two files with the same columns: each its own source (the file name)
    (pathlib.Path(ckpt) / "aime.jsonl").write_text("".join(json.dumps(r) + "\n" for r in SHIPPED_ROWS[:2]))
    task = math_jsonl.make_math_jsonl(tokenizer=str(ckpt), eval_path=[str(SHIPPED), str(pathlib.Path(ckpt) / "aime.jsonl")],
                                      max_rows=2, backend="fallback")
    probs = task.eval_problems(count=4)
    assert [r["source"] for r in task.rows_of(probs)] == ["math_tiny", "math_tiny", "aime", "aime"]
    gold = [r["answer"] for r in task.rows_of(probs)]
    # 2 samples per problem: right / wrong for math_tiny, wrong / wrong and right / right for aime
    responses = [f"\\boxed{{{gold[0]}}}", "\\boxed{-1}", f"\\boxed{{{gold[1]}}}", "\\boxed{-1}",
                 "\\boxed{-1}", "\\boxed{-2}", f"\\boxed{{{gold[3]}}}", f"\\boxed{{{gold[3]}}}"]
    ep = _episodes(task, probs, responses, [1, 0, 1, 0, 0, 0, 1, 1])
    m = task.episode_metrics(probs, ep)
    assert m["math_tiny/mean@2"] == 0.5 and m["math_tiny/pass@2"] == 1.0 and m["math_tiny/maj@2"] == 1.0
    assert m["aime/mean@2"] == 0.5 and m["aime/pass@2"] == 0.5 and m["aime/maj@2"] == 0.5
    assert m["all/mean@2"] == 0.5 and m["all/pass@1"] == pytest.approx(0.5)
    train = task.train_problems(seed=0, step=0, count=2)
    assert task.episode_metrics(train, ep) == {}  # training rollouts: no eval metrics


def test_custom_reward_sees_every_column(ckpt):
    task = math_jsonl.make_math_jsonl(tokenizer=str(ckpt), path=str(DATA / "problems.jsonl"), **MINE,
                                      reward=RewardConfig(path=str(DATA / "my_reward.py"), name="correct"))
    probs = task.train_problems(seed=0, step=0, count=3)
    finals = [r["columns"]["final"] for r in task.rows_of(probs)]
    responses = []
    for f in finals:
        responses += [f"\\boxed{{{f}}}", "\\boxed{-7}"]
    ep = _episodes(task, probs, responses, np.zeros(6))
    r = np.asarray(task.rewards(probs, types.SimpleNamespace(tokens=ep.tokens, lengths=ep.lengths), group_size=2))
    np.testing.assert_array_equal(r, np.tile([1.0, 0.0], (3, 1)))
    prov = task.provenance()
    assert prov["reward_fn"]["name"] == "correct" and len(prov["reward_fn"]["sha256"]) == 64
    assert prov["grader"]["backend"] in ("math-verify", "fallback")
    # the level column reaches the function as a list aligned with the completions
    (pathlib.Path(ckpt) / "lv.py").write_text("def f(completions, level, question, final):\n"
                                              "    return [float(l >= 2) for l in level]\n")
    task2 = math_jsonl.make_math_jsonl(tokenizer=str(ckpt), path=str(DATA / "problems.jsonl"), **MINE,
                                       reward=RewardConfig(path=str(pathlib.Path(ckpt) / "lv.py"), name="f"))
    r2 = np.asarray(task2.rewards(probs, types.SimpleNamespace(tokens=ep.tokens, lengths=ep.lengths), group_size=2))
    levels = [r["columns"]["level"] for r in task.rows_of(probs)]
    np.testing.assert_array_equal(r2, np.repeat(np.array(levels)[:, None] >= 2, 2, axis=1).astype(np.float32))


def test_dataset_from_the_local_hf_datasets_cache(tmp_path, monkeypatch):
    """``org/name`` read offline from the datasets cache in the layout ``load_dataset`` leaves after a
    Hub download (``<cache>/org___name/default/0.0.0/<commit>/name-<split>.arrow`` + ``dataset_info.json``),
    written here by datasets' own Parquet builder from verl_test.parquet: the rows equal the Parquet
    file's; an absent split is one error line naming the cached splits."""
    datasets = pytest.importorskip("datasets")
    pytest.importorskip("pyarrow")
    from datasets.packaged_modules.parquet.parquet import Parquet

    commit = "0123456789abcdef0123456789abcdef01234567"
    Parquet(cache_dir=str(tmp_path / "build"), dataset_name="tiny-verl", hash=commit, config_name="default",
            data_files={"test": str(DATA / "verl_test.parquet")}).download_and_prepare()
    built = next((tmp_path / "build" / "tiny-verl").glob(f"default*/0.0.0/{commit}"))
    cache = tmp_path / "datasets"
    (cache / "acme___tiny-verl" / "default" / "0.0.0").mkdir(parents=True)
    built.rename(cache / "acme___tiny-verl" / "default" / "0.0.0" / commit)
    assert (cache / "acme___tiny-verl" / "default" / "0.0.0" / commit / "tiny-verl-test.arrow").is_file()
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    want = math_jsonl.load_rows(str(DATA / "verl_test.parquet"), **VERL)
    got = math_jsonl.load_rows("acme/tiny-verl", split="test", **VERL)
    assert [(r["problem"], r["answer"], r["source"], r["columns"]) for r in got] == \
        [(r["problem"], r["answer"], r["source"], r["columns"]) for r in want]
    with pytest.raises(ValueError, match=r"^math_jsonl: data path 'acme/tiny-verl' is not a file and not in the "
                                         r"local Hugging Face cache \(split='train'; offline.*one of \['test'\]") as e:
        math_jsonl.load_rows("acme/tiny-verl", **VERL)
    assert "\n" not in str(e.value)

"""results/ by study (``experiments.studies.pages``): the committed index and page heads are what the code
writes, every study has its folder and page, and results/ holds records and pages, not scripts."""
import dataclasses
import pathlib

import pytest

from experiments.studies import pages

REPO = pathlib.Path(__file__).resolve().parents[3]
RESULTS = REPO / "results"


def test_committed_pages_are_what_the_writer_writes():
    stale = [str(p.relative_to(REPO)) for p, text in pages.render(RESULTS).items() if p.read_text() != text]
    assert stale == [], f"run python -m experiments.studies.pages: {stale}"


def test_every_study_has_a_folder_and_the_index_names_it():
    index = (RESULTS / "README.md").read_text()
    for s in pages.STUDIES:
        assert (RESULTS / s.folder / "README.md").is_file(), s.folder
        assert f"]({s.folder}/README.md)" in index


def test_results_holds_no_scripts_and_no_loose_figures():
    assert sorted(p.name for p in RESULTS.glob("*.png")) == []
    scripts = [str(p.relative_to(RESULTS)) for ext in ("*.sh", "*.py") for p in RESULTS.rglob(ext)
               if "/code-" not in str(p)]
    assert scripts == []


def test_page_keeps_the_record_below_the_head(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "a.png").write_bytes(b"")
    study = pages.Study("x", "T", "Q?", "cmd", "V.")
    first = pages.page(study, tmp_path / "x", "# old record\nkept\n")
    assert first.startswith(pages.BEGIN) and first.endswith("# old record\nkept\n") and "[a.png](a.png)" in first
    again = pages.page(pages.Study("x", "T2", "Q?", "cmd", "V2."), tmp_path / "x", first)
    assert "V2." in again and "V." not in again.replace("V2.", "") and again.endswith("# old record\nkept\n")


def test_figures_leave_out_sweep_worktrees_and_skipped_patterns(tmp_path):
    for rel in ("a.png", "sweep/curves.png", "sweep/runs/r1/curves.png", "sweep/code-abc/results/x/b.png"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"")
    assert pages.figures(tmp_path) == ["a.png", "sweep/curves.png", "sweep/runs/r1/curves.png"]
    assert pages.figures(tmp_path, ("sweep/runs/*",)) == ["a.png", "sweep/curves.png"]


def test_every_interval_a_verdict_quotes_is_in_its_record():
    """A verdict is typed by hand; its intervals must still be the record's (a stale one is what the audit found)."""
    bad = {s.folder: pages.unbacked(s, RESULTS / s.folder) for s in pages.STUDIES if (RESULTS / s.folder).is_dir()}
    assert {k: v for k, v in bad.items() if v} == {}


def test_unbacked_finds_a_stale_interval_and_ignores_the_head(tmp_path):
    folder = tmp_path / "x"
    folder.mkdir()
    study = pages.Study("x", "T", "Q?", "cmd", "Faster: 2.33x [1.10, 2.71]; gain +0.096 [+0.079, +0.114].")
    record = "| arm | W=0: 2.33 [1.10, 2.71] (4) |\n| jax | +0.096 [+0.079, +0.114] |\n"
    (folder / "README.md").write_text(pages.page(study, folder, record))
    assert pages.unbacked(study, folder) == []
    stale = pages.Study("x", "T", "Q?", "cmd", "Faster: 2.33x [1.10, 2.72].")
    (folder / "README.md").write_text(pages.page(stale, folder, record))   # the head quotes it; the record does not
    assert pages.unbacked(stale, folder) == ["2.33 [1.10, 2.72]"]
    # record="generated": a hand-written section does not back the verdict, a generated block does
    hand = "## Written at 4 pairs\n2.33x [1.10, 2.72]\n"
    gen = "<!-- x-results:begin -->\n| W=0: 2.33 [1.10, 2.71] (5) |\n<!-- x-results:end -->\n"
    strict = pages.Study("x", "T", "Q?", "cmd", "Faster: 2.33x [1.10, 2.72] then 2.33x [1.10, 2.71].", record="generated")
    (folder / "README.md").write_text(pages.page(strict, folder, hand + gen))
    assert pages.unbacked(strict, folder) == ["2.33 [1.10, 2.72]"]
    assert pages.unbacked(dataclasses.replace(strict, record="page"), folder) == []
    with pytest.raises(ValueError, match=r"record='tables'; allowed: 'page', 'generated'"):
        pages.unbacked(dataclasses.replace(strict, record="tables"), folder)
    (folder / "README.md").write_text(pages.page(stale, folder, record))
    (folder / "code-abc").mkdir()
    (folder / "code-abc" / "README.md").write_text("2.33 [1.10, 2.72]")    # a sweep worktree is not the record
    assert pages.unbacked(stale, folder) == ["2.33 [1.10, 2.72]"]

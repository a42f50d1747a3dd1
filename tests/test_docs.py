"""The docs hold together: every relative link and image in README.md and docs/*.md points to a file of the repo (and
to a heading that exists, for #anchors), the README's scripts table names scripts that exist and every script is in
it, every detail id tagged in a script is explained in docs/details.md, and the README and the module docstrings stay
short."""

import ast
import re
import subprocess

import pytest

from helpers import REPO

PAGES = ["ppo", "atari", "multigpu", "envpool", "continuous", "multidiscrete", "benchmarks", "details", "speed"]
DOCS = [REPO / "README.md"] + sorted((REPO / "docs").glob("*.md"))
MAX_DOCSTRING_LINES = 10  # issue 15: "at most ~8 lines"; the opening and closing quotes count
MAX_README_LINES = 200  # issue 15: "at most ~200 lines"
MAX_README_WORDS = 1200  # issue 86: "under 1,200 words", counted as `wc -w` counts them

FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.S | re.M)
CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HTML_SRC = re.compile(r"<(?:img|a)\b[^>]*?\b(?:src|href)=\"([^\"]+)\"", re.I)
HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.*?)[ \t#]*$", re.M)
TAG = re.compile(r"\[((?:[A-Z]\d+)(?:,\s*[A-Z]\d+)*)\]")


def prose(text):
    """The text without fenced code blocks and inline code, where brackets and parentheses are not links."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def link_targets(text):
    """Every link and image target of a Markdown text, in order."""
    text = prose(text)
    return LINK.findall(text) + HTML_SRC.findall(text)


def slug(heading):
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation removed, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text):
    """The anchors of a page's headings; a repeated heading gets -1, -2, ... as on GitHub."""
    seen, result = {}, set()
    for heading in HEADING.findall(FENCE.sub("", text)):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        result.add(base if n == 0 else f"{base}-{n}")
    return result


def broken_links(page, text):
    """Each relative link of `text` (the content of the file `page`) that does not resolve, with the reason."""
    broken = []
    for target in link_targets(text):
        # https:, mailto:, ...: not a file of the repo
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if REPO not in file.parents and file != REPO:
            broken.append(f"{target}: outside the repository")
        elif not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(text if file == page else file.read_text()):
            broken.append(f"{target}: no heading with anchor #{anchor} in {file.relative_to(REPO)}")
    return broken


def scripts_table():
    """The scripts named in the first column of the README's table under '## Scripts'."""
    readme = (REPO / "README.md").read_text()
    section = re.search(r"^## Scripts\s*$(.*?)(?=^## )", readme, re.S | re.M)
    assert section, "README.md has no '## Scripts' section"
    rows = [line for line in section.group(1).splitlines() if line.startswith("|")]
    return [m.group(1) for row in rows[2:] if (m := re.match(r"\|\s*`([^`]+\.py)`", row))]


def diff_lines(parent, variant):
    """What a variant costs: the lines `diff parent variant` removes and adds, as the README counts them."""
    diff = subprocess.run(["diff", parent, variant], cwd=REPO, capture_output=True, text=True)
    assert diff.returncode in (0, 1), diff.stderr
    return sum(line.startswith(("<", ">")) for line in diff.stdout.splitlines())


def test_the_scripts_table_gives_each_variants_diff_lines():
    readme = (REPO / "README.md").read_text()
    rows = re.findall(r"^\| `(ppo\w*\.py)` \| [^|]* \| `(ppo\w*\.py)` \| (\d+) \|", readme, re.M)
    assert len(rows) == len(scripts_table()) - 1, "every script but ppo.py names its parent and its diff lines"
    wrong = {variant: (int(count), diff_lines(parent, variant)) for variant, parent, count in rows}
    wrong = {variant: counts for variant, counts in wrong.items() if counts[0] != counts[1]}
    assert not wrong, f"README.md's diff lines (given, counted): {wrong}"
    assert diff_lines("ppo.py", "ppo_atari.py") > 0


def test_the_docs_pages_exist_and_the_readme_is_a_front_page():
    for page in PAGES:
        assert (REPO / "docs" / f"{page}.md").is_file(), f"docs/{page}.md is missing"
    lines = len((REPO / "README.md").read_text().splitlines())
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines: move details to docs/"
    words = len((REPO / "README.md").read_text().split())
    assert words < MAX_README_WORDS, f"README.md has {words} words: move details to docs/"


def results_table(text, header):
    """The Markdown table that starts with header, and the text without it."""
    table = re.search(rf"^{re.escape(header)}.*?\n(?=[^|])", text, re.S | re.M)
    assert table, f"no table starting with {header!r}"
    return table.group(0), text.replace(table.group(0), "")


def restated(text, header):
    """The results of that table (numbers with two decimals, such as 489.52) that the rest of the text states again."""
    table, rest = results_table(text, header)
    numbers = set(re.findall(r"\d+\.\d\d\b", table))
    return sorted(n for n in numbers if re.search(rf"(?<![\d.]){re.escape(n)}(?!\d)", rest))


def test_the_readme_states_each_result_in_its_table_only():
    """The prose may point at a row of the results table, never restate its numbers (or give others for them)."""
    readme = (REPO / "README.md").read_text()
    table, _ = results_table(readme, "| script | env | steps |")
    assert len(re.findall(r"\d+\.\d\d\b", table)) > 20
    assert not restated(readme, "| script | env | steps |"), "README.md states these results outside its table"
    sample = "| script | env | steps |\n| --- |\n| a | 11.25 ± 0.50 |\n\nAbove: 11.25, not 1.25 or 111.25.\n"
    assert restated(sample, "| script | env | steps |") == ["11.25"]


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_and_image_resolves(page):
    text = page.read_text()
    assert link_targets(text), f"{page.name}: no link found; the parser must be broken"
    assert broken_links(page, text) == []


def test_the_link_check_finds_broken_links():
    page = REPO / "docs" / "ppo.md"
    text = (
        "# Title\n\n## A `code` heading (with: punctuation)\n\n"
        "[ok](../README.md) [ok too](#title) [ok as well](#a-code-heading-with-punctuation) "
        "![img](../benchmark/results/classic_control/CartPole-v1.png) [web](https://example.com/x)\n"
        "`[not a link](nowhere.md)`\n\n```\n[not a link either](nowhere.md)\n```\n\n"
        "[gone](no-such-page.md) ![gone](../benchmark/results/none.png) [bad anchor](#no-such-heading) "
        '[escapes](../../etc/passwd) <img src="missing.png">\n'
    )
    assert [b.split(":")[0] for b in broken_links(page, text)] == [
        "no-such-page.md",
        "../benchmark/results/none.png",
        "#no-such-heading",
        "../../etc/passwd",
        "missing.png",
    ]


def test_github_anchors():
    assert slug("`ppo_atari.py` (parent: `ppo.py`)") == "ppo_ataripy-parent-ppopy"
    assert slug("Core (C1–C13)") == "core-c1c13"
    assert slug("[E1] envpool's autoreset and episode statistics") == "e1-envpools-autoreset-and-episode-statistics"
    assert anchors("# Tests\n## Tests\n```\n# not a heading\n```\n") == {"tests", "tests-1"}


def test_the_scripts_table_names_every_script_and_only_scripts_that_exist():
    named = scripts_table()
    assert len(named) == len(set(named)), f"a script is listed twice: {named}"
    assert [s for s in named if not (REPO / s).is_file()] == []
    assert sorted(named) == sorted(p.name for p in REPO.glob("ppo*.py"))


def test_every_tagged_detail_is_explained_in_details_md():
    details = (REPO / "docs" / "details.md").read_text()
    explained = set(re.findall(r"^\| ([A-Z]\d+) \|", details, re.M))
    tagged = set()
    for script in REPO.glob("ppo*.py"):
        for group in TAG.findall(script.read_text()):
            tagged.update(re.split(r",\s*", group))
    assert len(tagged) > 40, f"only {sorted(tagged)} found: the tag pattern must be broken"
    assert sorted(tagged - explained) == []


@pytest.mark.parametrize("script", sorted(p.name for p in REPO.glob("ppo*.py")))
def test_module_docstring_is_short(script):
    source = (REPO / script).read_text()
    tree = ast.parse(source)
    docstring = ast.get_docstring(tree, clean=False)
    assert docstring, f"{script} has no module docstring"
    node = tree.body[0]
    lines = node.end_lineno - node.lineno + 1
    assert lines <= MAX_DOCSTRING_LINES, f"{script}: the module docstring has {lines} lines"
    assert "Parent:" in docstring or script == "ppo.py", f"{script}: the docstring does not name its parent"


# Issue 86: a user page says what a script does, how to run it and what it reaches; when a run was made, on which CPU
# and in how many parts is for its report under benchmark/results/ (docs/benchmarks.md and docs/speed.md, the pages
# of measurements, may say it too).
USER_PAGES = [page for page in DOCS if page.name not in ("benchmarks.md", "speed.md")]
RUN_LOG = re.compile(
    r"\bUTC\b"  # a time of day
    r"|\b(?:EPYC|Xeon|Ryzen|Threadripper|Zen ?\d|AVX(?:-?512|2)?)\b|\blscpu\b"  # a CPU model, or the tool naming it
    # the parts of a run
    r"|\bin (?:\d+|two|three|four|five|six|seven|eight|nine|ten|several|many) parts\b|\bparts? \d+ of\b"
    r"|\bpaused at steps?\b|\bunfinished starts?\b"
)


def run_log_sentences(text):
    """The sentences of a Markdown text (its code too, its lines joined; a table row or a heading counts as one) that
    name a UTC time, a CPU model or the parts of a run."""
    pieces = re.split(r"(?<=[.!?])\s+|\n\s*\n|\n(?=\s*[|#])|(?<=\|)\n", text)
    sentences = [" ".join(piece.split()) for piece in pieces]
    return [sentence for sentence in sentences if RUN_LOG.search(sentence)]


def test_no_user_page_says_when_where_or_in_how_many_parts_a_run_was_made():
    flagged = [
        "Seed 1 solved it (2026-11-25 10:47-10:52 UTC).",
        "Measured on the project's machine (`lscpu`: AMD\nEPYC, 2 cores).",
        "on an Intel Xeon (AVX-512)",
        "It solved Pong in 3 h 52 min of training, in seven\nparts.",
        "It was paused at step 1,388,544 and continued.",
        "The report also holds two earlier, unfinished starts of the same command.",
        "| seed 1 | 3,764,272 | 2 cores, Zen 4 |",
        "```bash\nSEEDS=1 bash benchmark/microrts.sh   # 6 runs, 12:35-14:50 UTC\n```",
    ]
    legitimate = (
        "**Two parts.** A script reads top down as PPO. A2: the max of the last 2 frames, in 4-frame steps. "
        "`PARTS=wide bash benchmark/mujoco_v5.sh` runs the `-k adapter` part of the tests on the units that can act "
        "now. On one H100 GPU with 16 CPU cores it ran 3,973 steps/s (2026-11-27), in parts of a second each.\n\n"
        "| script | steps, seed | training time |\n| --- | --- | --- |\n| `ppo_atari.py` | 10M, seed 1 | 8.7 h |\n"
    )
    assert [len(run_log_sentences(sample)) for sample in flagged] == [1] * len(flagged)
    assert run_log_sentences(legitimate) == []
    assert {page.name for page in USER_PAGES} >= {"README.md", "ppo.md", "atari.md", "details.md"}

    found = [
        f"{page.relative_to(REPO)}: {sentence[:160]}"
        for page in USER_PAGES
        for sentence in run_log_sentences(page.read_text())
    ]
    assert found == [], "move these to the report under benchmark/results/ that the page links:\n" + "\n".join(found)

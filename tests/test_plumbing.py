"""The two-part layout of every script: the PPO first (Args ... main), then one divider and the run plumbing, whose
text is the same in every single-process script, so that `diff` of two of them never shows plumbing."""

import ast
import difflib
import io
import math
import re
import tokenize
import types

import pytest

from helpers import REPO, SCRIPTS, load_script

DIVIDER = "# " + "=" * 117  # the line above "# Run plumbing: ..."
ORDER = ["Args", "make_env", "layer_init", "Agent", "compute_gae", "ppo_loss", "evaluate", "main"]


def parts(script):
    """(the text above the divider, the text from the divider to the end) of a script."""
    text = (REPO / script).read_text()
    start = text.index(DIVIDER + "\n# Run plumbing")
    return text[:start], text[start:]


SINGLE_PROCESS = [script for script in SCRIPTS if script != "ppo_atari_multigpu.py"]


def test_the_plumbing_is_the_same_text_in_every_single_process_script():
    reference = parts("ppo.py")[1]
    # tyro's parse, then main
    assert reference.endswith('\nif __name__ == "__main__":\n    main(tyro.cli(Args))\n')
    assert len(SINGLE_PROCESS) == 8
    for script in SINGLE_PROCESS:
        text = (REPO / script).read_text()
        assert text.count(DIVIDER + "\n# Run plumbing") == 1, script  # one divider
        assert parts(script)[1] == reference, f"{script}: its plumbing differs from ppo.py's"


def test_the_multigpu_plumbing_differs_only_by_what_torchrun_needs():
    """ppo_atari_multigpu.py's plumbing is the same text but for the ranks: rank 0 alone writes, the process group is
    closed, a second signal waits under torchrun, the other ranks pause before an error. About 50 lines of diff."""
    reference = parts("ppo.py")[1].splitlines()
    multigpu = parts("ppo_atari_multigpu.py")[1].splitlines()
    diff = difflib.unified_diff(reference, multigpu, lineterm="", n=0)
    changed = [line for line in diff if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert 0 < len(changed) <= 55, "\n".join(changed)
    added = "\n".join(line for line in changed if line.startswith("+"))
    assert "rank" in added and "torch.distributed.destroy_process_group()" in added


def test_the_ctrl_c_guard_before_the_imports_is_the_same_in_every_script():
    """Before the slow imports, `python <script>` lets Ctrl-C end the process without a traceback."""
    guard = (
        "import signal\n\n"
        "# before the imports below (seconds): until training starts, Ctrl-C ends the process quietly\n"
        'if __name__ == "__main__":\n    signal.signal(signal.SIGINT, signal.SIG_DFL)\nimport contextlib\n'
    )
    for script in SCRIPTS:
        head = parts(script)[0]
        assert head.index(guard) < head.index("import torch"), script


@pytest.mark.parametrize("script", SCRIPTS)
def test_ppo_first_in_reading_order_then_the_plumbing(script):
    """Module level: the PPO definitions in reading order above the divider, the Run class below it, and nothing that
    runs but the __main__ guards. main reaches the plumbing only through Run's few public names."""
    ppo, plumbing = parts(script)
    top = [node.name for node in ast.parse(ppo).body if isinstance(node, (ast.FunctionDef, ast.ClassDef))]
    assert [name for name in top if name in ORDER] == ORDER, top
    below = ast.parse(plumbing).body
    assert [node.name for node in below if isinstance(node, ast.ClassDef)] == ["Run"]
    assert not [node for node in below if isinstance(node, ast.FunctionDef)]
    for node in ast.parse(ppo + plumbing).body:  # definitions, imports and constants only
        docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        kinds = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef, ast.Assign, ast.AugAssign, ast.If)
        assert docstring or isinstance(node, kinds), ast.dump(node)[:80]
        if isinstance(node, ast.If):
            assert ast.unparse(node.test) == "__name__ == '__main__'"
    main = next(node for node in ast.parse(ppo).body if getattr(node, "name", None) == "main")
    used = {
        node.attr for node in ast.walk(main) if isinstance(node, ast.Attribute) and ast.unparse(node.value) == "run"
    }
    public = {
        "fail",
        "load",
        "start",
        "seed",
        "name",
        "start_iteration",
        "recent_returns",
        "progress",
        "save",
        "target_reached",
        "stop_signal",
    }
    if script == "ppo_atari_multigpu.py":  # its own plumbing, for torchrun
        public |= {"iterations"}
    assert used <= public, used


@pytest.mark.parametrize("script", SCRIPTS)
def test_written_plainly_no_comment_on_a_def_line_and_no_backslash_continuation(script):
    """Two house rules that ruff does not check: a function or class says what it is in a docstring, not in a comment
    on its def line; and no line of code is continued with a backslash (a backslash inside a string is text)."""
    text = (REPO / script).read_text()
    lines = text.splitlines()
    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    on_def = [
        lines[token.start[0] - 1]
        for token in tokens
        if token.type == tokenize.COMMENT and re.match(r"\s*(async def|def|class) ", lines[token.start[0] - 1])
    ]
    assert not on_def, on_def
    # the lines that end inside a string running on to the next line
    strings = [token for token in tokens if token.type == tokenize.STRING]
    in_string = {n for token in strings for n in range(token.start[0], token.end[0])}
    continued = [line for n, line in enumerate(lines, 1) if line.endswith("\\") and n not in in_string]
    assert not continued, continued


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_flag_has_a_one_line_help_text(script):
    """Each field of Args is followed by its docstring, which tyro shows as the flag's help; on one line, since tyro
    keeps a docstring's line breaks and --help would show a ragged line."""
    (args,) = [node for node in ast.parse((REPO / script).read_text()).body if getattr(node, "name", "") == "Args"]
    helps = {}
    for field, after in zip(args.body, args.body[1:] + [None]):
        if isinstance(field, ast.AnnAssign):
            text = after.value.value if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) else None
            helps[field.target.id] = text
    assert len(helps) >= 30 and all(helps.values()), [name for name, text in helps.items() if not text]
    assert not [name for name, text in helps.items() if "\n" in text]


@pytest.mark.parametrize("seconds", [1, 25, 30])
def test_the_progress_line_every_twentieth_of_the_run_and_at_least_once_a_minute(
    seconds, tmp_path, monkeypatch, capsys
):
    """1,000 iterations of `seconds` each on a fake clock: a line after the first, the last and every 50th (a 20th of
    the run), and besides those one at the first iteration that ends 60 s or more after the previous line."""
    module = load_script("ppo.py")
    monkeypatch.chdir(tmp_path)
    args = module.Args(total_timesteps=1000 * 512)  # 4 envs x 128 steps a batch
    run = module.Run(args)
    run.writer = types.SimpleNamespace(add_scalar=lambda *a: None)
    now = [0.0]
    monkeypatch.setattr(module, "time", types.SimpleNamespace(time=lambda: now[0]))
    run.start_time = run.printed = 0.0
    capsys.readouterr()  # what Run printed before
    for iteration in range(1, args.num_iterations + 1):
        now[0] += seconds
        run.progress(iteration)
    lines = [int(line.split()[1].split("/")[0]) // 512 for line in capsys.readouterr().out.splitlines()]
    assert args.num_iterations == 1000 and set(lines) >= {1, *range(50, 1001, 50)}
    if seconds == 1:  # 50 s between two 20ths: those lines only
        assert lines == [1, *range(50, 1001, 50)]
    # a minute or more is 3 iterations of 25 s, 2 of 30 s: so far apart, or less where the later one is a 20th
    else:
        minute = math.ceil(60 / seconds)
        gaps = [(b - a, b) for a, b in zip(lines, lines[1:])]
        assert all(gap == minute or (gap < minute and b % 50 == 0) for gap, b in gaps), gaps

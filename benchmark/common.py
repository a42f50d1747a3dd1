"""What benchmark/run.py and benchmark/report.py share (imported as `common`: Python puts benchmark/ on the path)."""

import argparse
import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


class HelpFormatter(argparse.HelpFormatter):
    """Each option's help, then its default once: "(default: X)" is added unless the help names the default itself
    or there is none to name (a required option, a flag that is off, an option that is unset by default)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "(default" in text or action.required or action.default in (None, False, [], argparse.SUPPRESS):
            return text
        default = " ".join(map(str, action.default)) if isinstance(action.default, list) else str(action.default)
        return f"{text} (default: {default.replace('%', '%%')})"


class Parser(argparse.ArgumentParser):
    """argparse, with bad input reported the way the ppo*.py scripts do it: one line on stderr, exit code 2."""

    def __init__(self, **kwargs):
        super().__init__(formatter_class=HelpFormatter, **kwargs)

    def error(self, message):
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def safe(text):
    """text made safe for a file name: anything but letters, digits and -_. becomes _ (ALE/Pong-v5 -> ALE_Pong-v5)."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


def load_script(name):
    """Import a top-level script of the repo (e.g. "ppo_atari.py") as a module, by its path; only definitions run."""
    spec = importlib.util.spec_from_file_location(Path(name).stem, REPO / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

"""Every ```python block of README.md and docs/**/*.md runs as written.

The blocks of one file run in order in one namespace (a page reads like a notebook: a block may use the
names an earlier block on the same page defined). A block is skipped only when its first line is
``# skip-snippet: <reason>`` with a non-empty reason (for example one that needs a GPU or 400k rows).
A block that warns fails too: the README and the docs must not show warnings the reader cannot act on.
"""

from __future__ import annotations

import re
import textwrap
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SKIP = re.compile(r"^#\s*skip-snippet:\s*(\S.*)$")
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[^\s`]*)[^\n]*$")


def _files() -> list[Path]:
    docs = ROOT / "docs"
    pages = [p for p in sorted(docs.rglob("*.md")) if "_build" not in p.parts and "generated" not in p.parts]
    return [ROOT / "README.md", *pages]


def python_blocks(text: str) -> list[tuple[int, str]]:
    """The ```python blocks of a markdown text as (first line number, dedented code)."""
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        indent, start, i = match["indent"], i + 1, i + 1
        while i < len(lines) and lines[i].strip() != "```":
            i += 1
        if i == len(lines):
            raise ValueError(f"unclosed code fence opened at line {start}")
        if match["lang"] in ("python", "py"):
            body = "\n".join(line[len(indent) :] if line.startswith(indent) else line for line in lines[start:i])
            blocks.append((start + 1, textwrap.dedent(body)))
        i += 1
    return blocks


def test_extraction_finds_indented_blocks_and_skips():
    text = (
        "x\n```python\na = 1\n```\n- item\n  ```python\n  # skip-snippet: needs a GPU\n  b = 2\n  ```\n"
        "```bash\nls\n```\n"
    )
    blocks = python_blocks(text)
    assert [code for _, code in blocks] == ["a = 1", "# skip-snippet: needs a GPU\nb = 2"]
    assert [line for line, _ in blocks] == [3, 7]
    assert SKIP.match(blocks[1][1].splitlines()[0])[1] == "needs a GPU"
    assert SKIP.match("# skip-snippet:") is None  # a reason is required


@pytest.mark.parametrize("path", _files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_snippets_run(path: Path, monkeypatch, tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    monkeypatch.chdir(tmp_path)  # files a snippet writes land in a temporary directory
    namespace: dict = {"__name__": "__snippet__"}
    blocks = python_blocks(path.read_text(encoding="utf-8"))
    for line, code in blocks:
        first = code.splitlines()[0] if code else ""
        if first.lstrip().startswith("# skip-snippet") and SKIP.match(first.strip()):
            continue
        assert not first.lstrip().startswith("# skip-snippet"), f"{path.name}:{line}: a skip needs a reason"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                exec(compile(code, f"{path.name}:{line}", "exec"), namespace)
            except Exception as error:  # the location of the failing block, then the error
                raise AssertionError(f"{path.relative_to(ROOT)}, block at line {line} failed: {error!r}") from error
        shown = [w for w in caught if not issubclass(w.category, (DeprecationWarning, PendingDeprecationWarning))]
        assert not shown, f"{path.relative_to(ROOT)}, block at line {line} warned: " + "; ".join(
            f"{w.category.__name__}: {w.message}" for w in shown
        )
        plt.close("all")

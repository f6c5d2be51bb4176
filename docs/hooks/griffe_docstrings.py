"""A griffe extension (mkdocs.yml: mkdocstrings ``extensions``) for actorrt's docstrings.

actorrt's docstrings are Google-style, with two reStructuredText habits that Markdown
does not know; this rewrites them, on the fly, before the API reference renders them:

- Sphinx roles (``:func:`get```, ``:class:`~actorrt.options.ActorOptions```) become code,
  linked to the object's entry when the API reference documents it. Left alone, a role
  at the start of a ``Returns:`` line is also misread as ``name: description``.
- A paragraph ending in ``::`` (``Example::``) followed by an indented block becomes a
  fenced Python code block.

The source files are not changed.
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|exc|data|obj):`(~?)([\w.]+)`")


def _roles(text: str, obj: griffe.Object) -> str:
    def replace(m: re.Match) -> str:
        short, name = m.group(1), m.group(2)
        shown = name.rsplit(".", 1)[-1] if short else name
        target = name
        if "." not in name or not name.startswith("actorrt."):
            try:
                target = obj.resolve(name)
            except Exception:  # not a name of this scope: a plain code span
                target = name
        # `optional`: linked when documented, plain code otherwise (no warning).
        return f'<autoref identifier="{target}" optional><code>{shown}</code></autoref>'

    return _ROLE.sub(replace, text)


def _literal_blocks(text: str) -> str:
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.rstrip().endswith("::") or line.strip() == "::":
            out.append(line)
            i += 1
            continue
        indent = len(line) - len(line.lstrip())
        lead = line.rstrip()[:-2]
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        block_start = j
        while j < len(lines) and (
            not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > indent
        ):
            j += 1
        block = lines[block_start:j]
        while block and not block[-1].strip():
            block.pop()
        if not block:
            out.append(line)
            i += 1
            continue
        pad = " " * indent
        heading = lead.strip()
        out.append(
            pad + (f"**{heading}:**" if re.fullmatch(r"\w+", heading) else lead.rstrip() + ":")
        )
        out.append("")
        out.append(pad + "```python")
        out.extend(
            pad + x if x.strip() else "" for x in textwrap.dedent("\n".join(block)).split("\n")
        )
        out.append(pad + "```")
        if j < len(lines):
            out.append("")
        i = j
    return "\n".join(out)


class ReSTToMarkdown(griffe.Extension):
    """Rewrites Sphinx roles and ``::`` literal blocks in every docstring."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        """Runs once per object, after the whole tree is loaded (names resolve)."""
        if obj.docstring is not None:
            obj.docstring.value = _literal_blocks(_roles(obj.docstring.value, obj))

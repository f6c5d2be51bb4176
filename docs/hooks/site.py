"""mkdocs hooks for the actorrt docs site (mkdocs.yml: ``hooks``).

1. Pages kept outside ``docs/`` (the DQN example's README and its figure, the changelog)
   are added to the site as they are, so there is one copy of each.
2. Links in the Markdown that leave ``docs/`` for such a page (``../examples/...``, which
   work when browsing the repository) are rewritten to the page's place in the site.

The docstrings' reStructuredText habits are handled by ``griffe_docstrings.py``.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]

# repository path -> path in the site's docs tree
MIRRORED = {
    "examples/atari_dqn/README.md": "examples/atari_dqn/README.md",
    "examples/atari_dqn/cartpole_curve.png": "examples/atari_dqn/cartpole_curve.png",
    "examples/atari_dqn/pong_h200_curve.png": "examples/atari_dqn/pong_h200_curve.png",
    "examples/atari_dqn/pong_h200_10min_curve.png": "examples/atari_dqn/pong_h200_10min_curve.png",
    "CHANGELOG.md": "changelog.md",
}


def on_files(files: Files, config, **kwargs) -> Files:
    """Adds the pages and files of ``MIRRORED`` to the site, read from their own place."""
    for repo_path, src_uri in MIRRORED.items():
        files.append(File.generated(config, src_uri, abs_src_path=str(ROOT / repo_path)))
    return files


_LINK = re.compile(r"(\]\()([^)\s#]+)(#[^)\s]*)?(\))")


def _repo_path_of(src_uri: str) -> str:
    for repo_path, uri in MIRRORED.items():
        if uri == src_uri:
            return repo_path
    return "docs/" + src_uri


def _site_path_of(repo_path: str) -> str | None:
    if repo_path in MIRRORED:
        return MIRRORED[repo_path]
    if repo_path.startswith("docs/"):
        return repo_path[len("docs/") :]
    return None


def on_page_markdown(markdown: str, page, config, files, **kwargs) -> str:
    """Points links that leave ``docs/`` for a mirrored page at its place in the site."""
    here = posixpath.dirname(_repo_path_of(page.file.src_uri))

    def fix(m: re.Match) -> str:
        target = m.group(2)
        if "://" in target or target.startswith(("/", "mailto:")):
            return m.group(0)
        repo_target = posixpath.normpath(posixpath.join(here, target))
        site_target = _site_path_of(repo_target)
        if site_target is None:
            return m.group(0)  # left alone: a link to a file the site lacks is reported
        new = posixpath.relpath(site_target, posixpath.dirname(page.file.src_uri))
        return f"{m.group(1)}{new}{m.group(3) or ''}{m.group(4)}"

    return _LINK.sub(fix, markdown)

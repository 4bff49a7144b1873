"""A griffe extension of the documentation site (``mkdocs.yml``): Sphinx roles in docstrings as code.

The project's docstrings cross-reference with Sphinx roles (``:class:`~tune_gym.session.Trial```,
``:func:`text <target>```); Markdown has no such syntax, so mkdocstrings would print the role
literally. Each role becomes inline code of what Sphinx would show: the last dotted part after
``~``, the text before ``<target>``, the whole target otherwise.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:mod|func|class|meth|attr|data|obj|exc|const|ref|term):`([^`]+)`")


def _shown(target: str) -> str:
    """What Sphinx shows for a role's content."""
    titled = re.fullmatch(r"(.+?)\s*<[^>]+>", target, flags=re.DOTALL)
    if titled:
        return titled.group(1)
    if target.startswith("~"):
        return target[1:].rsplit(".", 1)[-1]
    return target


def roles_to_code(text: str) -> str:
    """``text`` with every Sphinx role replaced by inline code (see the module docstring)."""
    return ROLE.sub(lambda m: f"``{_shown(m.group(1))}``", text)


class SphinxRoles(griffe.Extension):
    """Rewrite the Sphinx roles of every loaded object's docstring (:func:`roles_to_code`)."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = roles_to_code(obj.docstring.value)

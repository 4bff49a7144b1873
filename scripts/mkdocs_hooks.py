"""MkDocs hooks of the documentation site (``mkdocs.yml``: ``hooks``): pages made at build time.

Nothing here is committed twice: the site's agent and leaderboard pages are generated from the
sources they describe on every build.

* One page per agent of the registry (:func:`agents.base.agent_classes`): the module docstring and
  the class (both rendered by mkdocstrings from the source), and a table of its options (default,
  allowed values, meaning) read from the declarations in the class's constructor
  (:func:`tune_gym.options.option_table`).
* The backends page ends with a table of each backend's options, read the same way
  (:func:`tune_gym.measure.backend_options`).
* The leaderboard: ``LEADERBOARD.md`` (suite ``standard``) and every
  ``benchmarks/results/leaderboard/*.md`` with their PNG plots, under ``leaderboard/``.
* The API reference: one page per top-level module or subpackage of ``tune_gym``, rendering
  every public module in it (names without a leading underscore).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # document this checkout's code, not an installed copy
    sys.path.insert(0, str(ROOT))

from agents.base import agent_classes  # noqa: E402
from tune_gym.measure import backend_ids, backend_options  # noqa: E402
from tune_gym.options import OptionDoc, option_table  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "leaderboard"
RESULTS_PREFIX = "benchmarks/results/leaderboard/"
#: Leaderboard pages after the standard suite's, in this order (others follow alphabetically).
LEADERBOARD_ORDER = ("vta", "external", "metatune_ablation", "oneshot_ablation")


def agent_page(agent_id: str) -> str:
    """The site path of an agent's page."""
    return f"agents/{agent_id}.md"


def leaderboard_pages() -> dict[str, Path]:
    """``{site path: source markdown}`` of the leaderboard pages, the standard suite's first."""
    extra = sorted(RESULTS.glob("*.md"), key=lambda p: (p.stem not in LEADERBOARD_ORDER,
                                                        LEADERBOARD_ORDER.index(p.stem)
                                                        if p.stem in LEADERBOARD_ORDER else 0, p.stem))
    return {"leaderboard/index.md": ROOT / "LEADERBOARD.md", **{f"leaderboard/{p.name}": p for p in extra}}


def api_pages() -> dict[str, list[str]]:
    """``{site path: [module, ...]}`` of the API reference: one page per top-level module or
    subpackage of ``tune_gym``, listing the package's public modules."""
    package = ROOT / "tune_gym"
    pages: dict[str, list[str]] = {}
    for path in sorted(package.iterdir()):
        if path.name.startswith("_") or not (path.suffix == ".py" or (path / "__init__.py").exists()):
            continue
        name = f"tune_gym.{path.stem}"
        modules = [name]
        if path.is_dir():
            modules += [f"{name}.{p.stem}" for p in sorted(path.glob("*.py")) if not p.stem.startswith("_")]
        pages[f"api/{name}.md"] = modules
    return pages


def api_markdown(modules: list[str]) -> str:
    """An API page: a title, then each module rendered by mkdocstrings."""
    lines = [f"# `{modules[0]}`", ""]
    for module in modules:
        lines += [f"::: {module}", "    options:", "      show_submodules: false", ""]
    return "\n".join(lines)


def api_index() -> str:
    """The API reference's front page: a table of its pages."""
    rows = [f"| [`{mods[0]}`]({site.removeprefix('api/')}) | {len(mods)} |" for site, mods in api_pages().items()]
    return "\n".join(["# API reference", "", "Rendered from the docstrings of `tune_gym`'s public modules "
                      "(the environments, spaces, backends, datasets and records). The agents' classes are on "
                      "their own pages under [Agents](../agents/index.md).", "",
                      "| page | modules |", "|---|---:|", *rows, ""])


def options_markdown(rows: list[OptionDoc]) -> list[str]:
    """An options table in markdown: option | default | allowed | meaning."""
    def cell(text: str) -> str:
        return text.replace("|", "&#124;")

    lines = ["| option | default | allowed | meaning |", "|---|---|---|---|"]
    for r in rows:
        default = r.default if r.default == "required" else f"`{r.default}`"
        lines.append(f"| `{r.name}` | {cell(default)} | {cell(r.allowed)} | {cell(r.help)} |")
    return lines


def backends_markdown() -> str:
    """The options of every backend, one table each (appended to the backends page)."""
    lines = ["## Options", "", "Each backend's options as their declarations in the code give them (also "
             "`tune-gym backends [ID]`); pass them as `backend_options={...}`, `make_backend(ID, **options)` or "
             "`-b KEY=VALUE`.", ""]
    for name in backend_ids():
        lines += [f"### `{name}`", "", *options_markdown(backend_options(name)), ""]
    return "\n".join(lines)


def agent_markdown(agent_id: str, target: str, description: str) -> str:
    """An agent's page: what it is, how to run it, its options, and its module and class docs."""
    module, _, attr = target.partition(":")
    cls = getattr(sys.modules[module], attr)
    lines = [f"# `{agent_id}`", "", description, "",
             f"Class `{module}.{attr}` (`{module.replace('.', '/')}.py`). Run it with "
             f"`tune-gym tune TASK --agent {agent_id} -o KEY=VALUE`, or `make_agent({agent_id!r}, **options)`.", ""]
    options = option_table(cls)
    if options:
        lines += ["## Options", "", f"As the constructor declares them (also `tune-gym agents {agent_id}`).", "",
                  *options_markdown(options), ""]
    lines += ["## Method", "", f"::: {module}", "    options:", "      members: false",
              "      show_root_heading: false", "      show_root_toc_entry: false", "",
              "## Class", "", f"::: {module}.{attr}", "    options:",
              "      members: false", "      show_root_heading: true", ""]
    return "\n".join(lines)


def on_config(config: Any) -> Any:
    """Add the agent pages and leaderboard pages to the navigation's Agents and Leaderboard sections."""
    sections = {next(iter(item)): item for item in config["nav"] if isinstance(item, dict)}
    for title, pages in (("Agents", [{f"{aid}": agent_page(aid)} for aid in agent_classes()]),
                         ("Leaderboard", [{p.stem if p.stem != "LEADERBOARD" else "standard": site}
                                          for site, p in leaderboard_pages().items()]),
                         ("API reference", [{mods[0]: site} for site, mods in api_pages().items()])):
        if title not in sections:
            raise ValueError(f"mkdocs.yml: nav has no {title!r} section to add the generated pages to")
        sections[title][title].extend(pages)
    return config


def on_files(files: Files, config: Any) -> Files:
    """Generate the agent pages, the leaderboard pages and their plots."""
    for agent_id, (target, description) in agent_classes().items():
        page = agent_markdown(agent_id, target, description)
        files.append(File.generated(config, agent_page(agent_id), content=page))
    for site, source in leaderboard_pages().items():
        text = source.read_text(encoding="utf-8")
        if source.parent == ROOT:  # LEADERBOARD.md links its plots from the repository root
            text = text.replace(f"]({RESULTS_PREFIX}", "](")
        files.append(File.generated(config, site, content=text))
    files.append(File.generated(config, "api/index.md", content=api_index()))
    for site, modules in api_pages().items():
        files.append(File.generated(config, site, content=api_markdown(modules)))
    for png in sorted(RESULTS.glob("*/*.png")):
        site = f"leaderboard/{png.relative_to(RESULTS).as_posix()}"
        files.append(File.generated(config, site, abs_src_path=str(png)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """End the Agents page with a table linking every agent's page, and the Backends page with
    their options."""
    if page.file.src_uri == "backends.md":
        return markdown + "\n\n" + backends_markdown()
    if page.file.src_uri != "agents/index.md":
        return markdown
    rows = [f"| [`{aid}`]({aid}.md) | {desc.replace('|', '&#124;')} |" for aid, (_, desc) in agent_classes().items()]
    return markdown + "\n\n## Every agent\n\n| id | what it is |\n|---|---|\n" + "\n".join(rows) + "\n"

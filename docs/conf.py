"""Sphinx configuration of the documentation site.

    pip install -e '.[docs]'
    python -m sphinx -W --keep-going -b html docs build/docs

The pages are the Markdown under ``docs/`` (MyST); ``api.md`` is the API reference, made from
the docstrings of each package's exports by the ``exports`` directive defined here.
``tests/test_docs_site.py`` builds the site with warnings as errors.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.ext.napoleon.docstring import GoogleDocstring
from sphinx.pycode import ModuleAnalyzer
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

project = "PATTON testbench"
author = "PATTON testbench authors"
copyright = "the PATTON testbench authors, Apache-2.0"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]
source_suffix = {".md": "markdown"}
root_doc = "index"
# Not pages: the figures and tables the pages show, the records and the code of measured.py.
exclude_patterns = ["_build", "img/**", "records/**", "sources/**", "measured.py"]

myst_heading_anchors = 3  # [text](page.md#a-heading) links, as on a forge
myst_enable_extensions = ["colon_fence"]

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
# Google-style sections (Args:, Returns:, Raises:) are read by google_sections below.
napoleon_google_docstring = False
napoleon_numpy_docstring = False

html_theme = "furo"
html_title = "PATTON testbench"

logger = logging.getLogger(__name__)


class Exports(SphinxDirective):
    """``.. exports:: PACKAGE``: the API of each name in ``PACKAGE.__all__``, in its order.

    Each package (``patton.sim`` ...) imports its exports lazily from the submodule that
    defines them (``PACKAGE._EXPORTS``), so ``automodule`` would see none of them: this
    directive writes one ``autoclass``/``autoexception``/``autofunction`` per name, and a
    ``py:data`` entry for a constant with its ``#:`` comment in the defining submodule.
    """

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        package_name = self.arguments[0]
        package = importlib.import_module(package_name)
        defined_in = {name: module for module, names in package._EXPORTS.items()
                      for name in names}
        lines = [f".. py:currentmodule:: {package_name}", ""]
        for name in package.__all__:
            lines += self._entry(package_name, defined_in[name], name, getattr(package, name))
        return self.parse_text_to_nodes("\n".join(lines))

    def _entry(self, package: str, module: str, name: str, value: Any) -> list[str]:
        """The reST lines that document ``package.name`` (defined in ``package.module``)."""
        if inspect.isclass(value):
            kind = "autoexception" if issubclass(value, BaseException) else "autoclass"
            return [f".. {kind}:: {package}.{name}", "   :members:", ""]
        if inspect.isfunction(value):
            return [f".. autofunction:: {package}.{name}", ""]
        comments = ModuleAnalyzer.for_module(f"{package}.{module}").find_attr_docs()
        doc = comments.get(("", name))
        if not doc:
            logger.warning("%s.%s: no '#:' comment in %s.%s", package, name, package, module,
                           location=self.get_location())
        return [f".. py:data:: {name}", f"   :type: {type(value).__name__}", "",
                *(f"   {line}" for line in doc or ()), ""]


def google_sections(app: Sphinx, what: str, name: str, obj: Any, options: Any,
                    lines: list[str]) -> None:
    """Napoleon's Google-style sections, in every docstring but an attribute's.

    Napoleon reads the first line of an attribute's docstring (``Extension wr16: WR_ABK
    that ...``) as ``TYPE: TEXT``; in this project's attribute comments the colon is prose.
    """
    if what not in ("attribute", "data", "property"):
        lines[:] = GoogleDocstring(lines, app.config, app, what, name, obj, options).lines()


def setup(app: Sphinx) -> dict[str, Any]:
    """Register the ``exports`` directive and the docstrings' Google-style sections."""
    app.add_directive("exports", Exports)
    app.connect("autodoc-process-docstring", google_sections)
    return {"parallel_read_safe": True}

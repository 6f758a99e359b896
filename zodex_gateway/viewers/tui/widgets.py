"""The viewer's own widgets: vi-keyed lists and the raw evidence view."""

from __future__ import annotations

import json
from typing import Any, ClassVar

from rich.syntax import Syntax
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static


class ListPane(OptionList):
    """An option list with vi keys."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("j", "cursor_down", "Down", show=False),
        Binding("k", "cursor_up", "Up", show=False),
        Binding("g", "first", "Top", show=False),
        Binding("G", "last", "Bottom", show=False),
    ]


class RawScreen(ModalScreen[None]):
    """The invocation detail JSON, as the observer returned it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss", "Close", show=False),
        Binding("r", "dismiss", "Close", show=False),
        Binding("j", "scroll('down')", show=False),
        Binding("k", "scroll('up')", show=False),
        Binding("g", "scroll('home')", show=False),
        Binding("G", "scroll('end')", show=False),
    ]

    def __init__(self, title: str, detail: dict[str, Any]) -> None:
        super().__init__()
        self._title = title
        self._detail = detail

    def compose(self) -> ComposeResult:
        with Vertical(id="raw"):
            yield Static(Text(self._title, style="bold"), id="raw-title")
            with VerticalScroll(id="raw-body"):
                text = json.dumps(self._detail, indent=2, ensure_ascii=False)
                yield Static(
                    Syntax(text, "json", theme="ansi_dark", word_wrap=True, background_color="default")
                )
            yield Static(Text("j/k scroll  g/G top/bottom  esc or r close", style="dim"), id="raw-keys")

    def action_scroll(self, where: str) -> None:
        body = self.query_one("#raw-body", VerticalScroll)
        if where == "down":
            body.scroll_down(animate=False)
        elif where == "up":
            body.scroll_up(animate=False)
        elif where == "home":
            body.scroll_home(animate=False)
        else:
            body.scroll_end(animate=False)

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(result)

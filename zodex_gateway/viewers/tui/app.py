"""The terminal viewer: an agent picker, the chosen agent's timeline, and a raw view.

The screen is a projection of a :class:`Board` that :class:`Live` keeps current; every
change marks the screen dirty and one short timer redraws it, so a burst of output events
costs one redraw.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Final

from rich.text import Text
from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widget import Widget
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from zodex_gateway.history import NO_AGENT
from zodex_gateway.viewers.tui import render
from zodex_gateway.viewers.tui.client import ObserverClient, ObserverError
from zodex_gateway.viewers.tui.live import Connection, Live
from zodex_gateway.viewers.tui.model import Board, Record
from zodex_gateway.viewers.tui.widgets import ListPane, RawScreen

if TYPE_CHECKING:
    # Only a type here: the viewer gets the access object from its caller.
    from zodex_gateway.local.observer_access import ObserverAccess

REDRAW_DELAY: Final = 0.05
FAILED_RETRY: Final = 5.0
ALL_ID: Final = "all"
KEYS: Final = "a agents · tab focus · j/k g/G move · enter expand · r raw · / search · q quit"


class WatchApp(App[int]):
    TITLE = "zodex local watch"
    ENABLE_COMMAND_PALETTE = False  # every action has its own key; ctrl+p would only distract
    CSS_PATH = "app.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit_viewer", "Quit"),
        Binding("ctrl+c", "quit_viewer", "Quit", show=False, priority=True),
        Binding("a", "agents", "Agents"),
        Binding("tab", "switch_focus", "Focus", priority=True),
        Binding("r", "raw", "Raw"),
        # Priority: the app must move focus before it routes the keys typed next (a
        # non-priority binding runs later, in the focused widget's own queue).
        Binding("slash", "search", "Search", priority=True),
        Binding("escape", "clear_search", "Clear", show=False),
    ]

    def __init__(
        self,
        access: ObserverAccess,
        *,
        agent_id: str | None,
        show_all: bool,
        rediscover: Callable[[], ObserverAccess] | None = None,
    ) -> None:
        super().__init__()
        self.board = Board(selected=agent_id, show_all=show_all)
        self.live = Live(
            ObserverClient(access),
            self.board,
            on_change=self._mark_dirty,
            on_state=self._show_state,
            rediscover=rediscover,
        )
        self.query_text = ""
        self.expanded: set[str] = set()
        self._order: list[str] = []
        self._keys: dict[str, tuple[int, bool, bool, bool, int, int]] = {}
        self._heights: list[int] = []  # screen lines of each shown record
        self._sticky = False  # the next change of records is a search: keep the cursor
        self._picker_signature: tuple[Any, ...] = ()
        self._redraw_pending = False
        self._loading_older = False

    # --- layout -------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static(id="title")
        with Horizontal(id="body"):
            yield ListPane(id="agents")
            with Vertical():
                yield Static(id="empty")
                yield ListPane(id="timeline")
        yield Input(placeholder="search records (enter keeps, esc clears)", id="search")
        with Horizontal(id="footer"):
            yield Static(KEYS, id="keys")
            yield Static(id="conn")

    def on_mount(self) -> None:
        self._show_state(self.live.connection)
        self._redraw()
        self._focus(self.timeline)
        self.run_worker(self._follow(), group="live", exit_on_error=False)
        self.set_interval(1.0, self._redraw_timeline)  # the elapsed time of running commands

    async def on_unmount(self) -> None:
        await self.live.client.aclose()

    async def _follow(self) -> None:
        while True:
            try:
                await self.live.run()
            except Exception as exc:
                # An answer this viewer did not expect: say so on screen and start over
                # (the board and the last event seen are kept).
                self.log.error(f"following the observer failed: {exc!r}")
                self._show_state(Connection("failed", f"{type(exc).__name__}: {exc}"))
                await asyncio.sleep(FAILED_RETRY)

    @property
    def timeline(self) -> ListPane:
        return self.query_one("#timeline", ListPane)

    @property
    def picker(self) -> ListPane:
        return self.query_one("#agents", ListPane)

    # --- redraw -------------------------------------------------------------------------

    def _mark_dirty(self) -> None:
        if not self._redraw_pending:
            self._redraw_pending = True
            self.set_timer(REDRAW_DELAY, self._redraw)

    def _redraw(self) -> None:
        self._redraw_pending = False
        self._redraw_picker()
        self._redraw_timeline()
        self._redraw_title()

    def _redraw_picker(self) -> None:
        agents = self.board.agents_by_recency()
        signature = (
            self.board.selected,
            self.board.show_all,
            *(
                (a["agent_id"], a.get("alias"), tuple(a.get("workdirs") or ())[:1], a.get("active_processes"))
                for a in agents
            ),
        )
        if signature == self._picker_signature:
            return
        self._picker_signature = signature
        options = [Option(render.all_agents_text(len(self.board.agents)), id=ALL_ID)]
        options += [Option(render.agent_text(agent), id=f"agent:{agent['agent_id']}") for agent in agents]
        picker = self.picker
        picker.set_options(options)
        chosen = ALL_ID if self.board.show_all else f"agent:{self.board.selected}"
        ids = [option.id for option in options]
        picker.highlighted = ids.index(chosen) if chosen in ids else None

    def _redraw_timeline(self) -> None:
        records = self.board.view(self.query_text)
        order = [str(r["presentation_id"]) for r in records]
        timeline = self.timeline
        rebuild = order != self._order
        index = self._next_highlight(order) if rebuild else timeline.highlighted
        cursor = order[index] if order and index is not None else None
        show_agent = self.board.show_all
        tick = int(time.time())  # running commands show their elapsed time, to the second
        keys = {
            pid: (
                self.board.revision(pid),
                pid in self.expanded,
                show_agent,
                pid == cursor,
                tick if _running(record) else 0,
                self._width(),
            )
            for pid, record in zip(order, records, strict=True)
        }
        if rebuild:
            self._rebuild_timeline(records, order, index)
        else:
            for position, record in enumerate(records):
                pid = order[position]
                if keys[pid] != self._keys.get(pid):
                    text = self._record_text(record, cursor=pid == cursor)
                    self._heights[position] = _height(text)
                    timeline.replace_option_prompt_at_index(position, text)
        self._order = order
        self._keys = keys
        self._sticky = False
        empty = self.query_one("#empty", Static)
        empty.display = not records
        timeline.display = bool(records)
        if not records:
            empty.update(self._empty_message())

    def _next_highlight(self, order: list[str]) -> int | None:
        """Where the cursor goes when the list of records changes: at the top (or nowhere
        yet) it follows the newest record; else, or when a search changed, it stays on the
        record it was on."""
        sticky = self._sticky
        if not order:
            return None
        old = self.timeline.highlighted
        old_pid = self._order[old] if old is not None and old < len(self._order) else None
        if old_pid not in order or (old == 0 and self.timeline.scroll_y == 0 and not sticky):
            return 0
        return order.index(old_pid)

    def _rebuild_timeline(self, records: list[Record], order: list[str], index: int | None) -> None:
        timeline = self.timeline
        old = timeline.highlighted
        # The screen row of the highlighted record, kept while records arrive above it.
        old_row = sum(self._heights[:old]) - int(timeline.scroll_y) if old is not None else 0
        texts = [self._record_text(r, cursor=position == index) for position, r in enumerate(records)]
        self._heights = [_height(text) for text in texts]
        timeline.set_options(Option(text, id=pid) for text, pid in zip(texts, order, strict=True))
        if index is None:
            return
        timeline.highlighted = index
        if index:
            timeline.scroll_to(y=max(0, sum(self._heights[:index]) - old_row), animate=False, immediate=True)

    def _record_text(self, record: Record, *, cursor: bool) -> Text:
        pid = str(record["presentation_id"])
        return render.record_text(
            record,
            expanded=pid in self.expanded,
            show_agent=self.board.show_all,
            cursor=cursor,
            now_ms=int(time.time() * 1000),
            width=self._width() or None,
        )

    def _width(self) -> int:
        return self.timeline.scrollable_content_region.width

    def on_resize(self) -> None:
        self._mark_dirty()  # commands are cut to the width

    def _empty_message(self) -> str:
        if self.query_text:
            return f"No records match “{self.query_text}”. Esc clears the search."
        if self.board.show_all:
            return "No records yet. Waiting for the first tool call…"
        if self.board.selected is None:
            return "No agents yet. Waiting for the first tool call…"
        if self.board.selected == NO_AGENT:
            return "No unattributed calls yet. Waiting for a call from a client with no session…"
        return f"No records for agent {self.board.selected} yet. Waiting for its tool calls…"

    def _redraw_title(self) -> None:
        selected = self.board.selected
        title = render.title_text(
            runtime_id=self.live.client.access.runtime_id,
            show_all=self.board.show_all,
            agent_id=selected,
            alias=str(self.board.agents.get(selected or "", {}).get("alias") or ""),
            shown=len(self._order),
            query=self.query_text,
            older=self.live.has_older(),
        )
        self.query_one("#title", Static).update(title)

    def _show_state(self, connection: Connection) -> None:
        text = render.connection_text(connection.state, connection.detail)
        for conn in self.query("#conn").results(Static):  # none before the first compose
            conn.update(text)

    # --- events from the widgets --------------------------------------------------------

    @on(OptionList.OptionHighlighted, "#agents")
    def _agent_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        option_id = event.option.id
        agent_id = None if option_id == ALL_ID else str(option_id or "").removeprefix("agent:")
        if (agent_id is None) == self.board.show_all and agent_id in (None, self.board.selected):
            return  # the redraw re-highlighting the current choice
        self.expanded.clear()
        self.run_worker(self._select(agent_id), group="select", exclusive=True, exit_on_error=False)

    async def _select(self, agent_id: str | None) -> None:
        try:
            await self.live.select(agent_id)
        except ObserverError as exc:
            self.notify(f"could not load the timeline: {exc.message}", severity="error")

    @on(OptionList.OptionSelected, "#agents")
    def _agent_chosen(self) -> None:
        self._focus(self.timeline)

    @on(OptionList.OptionSelected, "#timeline")
    def _record_chosen(self, event: OptionList.OptionSelected) -> None:
        pid = str(event.option.id)
        if pid in self.expanded:
            self.expanded.remove(pid)
        else:
            self.expanded.add(pid)
        self._redraw()

    @on(OptionList.OptionHighlighted, "#timeline")
    def _record_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        self._redraw_timeline()  # moves the cursor mark
        at_end = event.option_index >= self.timeline.option_count - 1
        if at_end and self.live.has_older() and not self._loading_older:
            self._loading_older = True
            self.run_worker(self._older(), group="older", exit_on_error=False)

    async def _older(self) -> None:
        try:
            await self.live.load_older()
        except ObserverError as exc:
            self.notify(f"could not load older records: {exc.message}", severity="error")
        finally:
            self._loading_older = False

    @on(Input.Changed, "#search")
    def _search_changed(self, event: Input.Changed) -> None:
        self.query_text = event.value
        self._sticky = True
        self._redraw()

    @on(Input.Submitted, "#search")
    def _search_kept(self) -> None:
        self._focus(self.timeline)

    # --- actions ------------------------------------------------------------------------

    def _focus(self, widget: Widget) -> None:
        # At once, not at the next idle as Widget.focus() does: keys typed right after
        # "/" or Esc must reach the widget they were typed for.
        self.screen.set_focus(widget)

    def action_quit_viewer(self) -> None:
        self.exit(0)

    def action_agents(self) -> None:
        picker = self.picker
        if not picker.display:
            picker.display = True
            self._focus(picker)
        elif picker.has_focus:
            picker.display = False
            self._focus(self.timeline)
            self._mark_dirty()  # a wider timeline: long commands can show more
        else:
            self._focus(picker)

    def action_switch_focus(self) -> None:
        if isinstance(self.screen, RawScreen):
            return
        picker = self.picker
        if picker.has_focus:
            self._focus(self.timeline)
        else:
            picker.display = True
            self._focus(picker)

    def action_search(self) -> None:
        search = self.query_one("#search", Input)
        if search.has_focus:
            search.insert_text_at_cursor("/")  # a slash typed into the search itself
            return
        if isinstance(self.screen, RawScreen):
            return
        # Shown at once (not through a class, applied at the next refresh) so it can take
        # focus now and keys typed right after "/" land in it.
        search.display = True
        self._focus(search)

    def action_clear_search(self) -> None:
        search = self.query_one("#search", Input)
        if not self.query_text and not search.display:
            return
        search.value = ""
        search.display = False
        self.query_text = ""
        self._sticky = True
        self._focus(self.timeline)
        self._redraw()

    def action_raw(self) -> None:
        index = self.timeline.highlighted
        if index is None or index >= len(self._order):
            return
        record = self.board.records.get(self._order[index])
        if record is None:
            return
        ids = record.get("invocation_ids") or [record["presentation_id"]]
        self.run_worker(self._raw(str(ids[0])), group="raw", exclusive=True, exit_on_error=False)

    async def _raw(self, invocation_id: str) -> None:
        try:
            detail = await self.live.client.invocation(invocation_id)
        except ObserverError as exc:
            self.notify(f"could not read invocation {invocation_id}: {exc.message}", severity="error")
            return
        await self.push_screen(RawScreen(f"invocation {invocation_id}", detail))


def _running(record: Record) -> bool:
    return record.get("kind") == "command" and record.get("status") == "running"


def _height(text: Text) -> int:
    return text.plain.count("\n") + 1

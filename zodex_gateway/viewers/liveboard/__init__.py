"""Liveboard: the browser board ``zodex local watch`` serves (static ES modules and CSS, no build step)."""

from __future__ import annotations

from pathlib import Path
from typing import Final

STATIC_DIR: Final = Path(__file__).parent / "static"

__all__ = ["STATIC_DIR"]

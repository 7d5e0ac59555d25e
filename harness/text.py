"""Text helpers shared by the tables and the diagnosis."""


def clip(s: str, width: int) -> str:
    """`s`, cut to `width` characters with `...` when longer."""
    return s if len(s) <= width else s[: width - 3] + "..."

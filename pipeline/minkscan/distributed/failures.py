"""What a failed Ray run means to the user: the minkscan error a task or actor raised,
found inside the exceptions Ray wraps it in (whose own messages name only the task)."""

from __future__ import annotations

from minkscan.errors import UserError


def user_error_in(error: BaseException) -> UserError | None:
    """The first minkscan `UserError` in ``error``'s chain of causes, if any.

    Ray re-raises a task's exception as a subclass of both its own error class and the
    original one; the original class (defined by minkscan) is what is returned, so its
    one-line message reaches the user unchanged.
    """
    seen: set[int] = set()
    stack: list[BaseException | None] = [error]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, UserError) and type(current).__module__.startswith("minkscan."):
            return current
        stack += [current.__cause__, current.__context__, getattr(current, "cause", None)]
    return None

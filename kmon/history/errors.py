"""The one error a malformed history raises, naming the line and field at fault."""

from __future__ import annotations


class HistoryError(ValueError):
    """Malformed history input: ``[path: ][line N: ][field "f": ]detail``.

    ``kmon check`` maps it to exit status 2; the message alone must let a user fix the input.
    """

    def __init__(
        self,
        detail: str,
        *,
        field: str | None = None,
        line: int | None = None,
        path: str | None = None,
    ) -> None:
        self.detail = detail
        self.field = field
        self.line = line
        self.path = path
        super().__init__(detail)

    def __str__(self) -> str:
        parts = []
        if self.path is not None:
            parts.append(f"{self.path}: ")
        if self.line is not None:
            parts.append(f"line {self.line}: ")
        if self.field is not None:
            parts.append(f'field "{self.field}": ')
        parts.append(self.detail)
        return "".join(parts)

    def at(self, *, line: int | None = None, path: str | None = None) -> HistoryError:
        """This error with its line and path filled in where still unknown."""
        if self.line is None:
            self.line = line
        if self.path is None:
            self.path = path
        return self

"""Reading /proc/self/mountinfo, whose fields escape space, tab, newline and backslash."""


def unescape(field: bytes) -> bytes:
    """Undo mountinfo's \\ooo octal escapes (file names are bytes and may hold any of them)."""
    out, i = bytearray(), 0
    while i < len(field):
        if field[i:i + 1] == b"\\" and field[i + 1:i + 4].isdigit():
            out.append(int(field[i + 1:i + 4], 8))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return bytes(out)

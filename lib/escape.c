/*
 * escape.c - text from the outside (bucket keys, file and member names,
 * URLs, server messages) as a terminal may show it: valid UTF-8 passes,
 * while control characters (C0, DEL, C1), the Unicode bidi controls and
 * bytes that start no valid UTF-8 sequence are written as \n, \r, \t,
 * \xHH or \uHHHH, so that a name cannot move the cursor, set a window
 * title, clear the screen or reorder a line. A backslash stays itself
 * (error messages nest other messages: escaping is idempotent), unless
 * the caller asks for \\ (train/report.c, whose text must read back).
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"

/*
 * The next character of s[0..len) as UTF-8: its code point and length in
 * *used, or -1 (length 1) for a byte that starts no valid sequence
 * (overlong forms, surrogates and past U+10FFFF included, RFC 3629).
 */
static long
utf8_next(const unsigned char *s, size_t len, size_t *used)
{
	long cp;
	size_t n, i;

	*used = 1;
	if (s[0] < 0x80)
		return s[0];
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		n = 2, cp = s[0] & 0x1f;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		n = 3, cp = s[0] & 0x0f;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		n = 4, cp = s[0] & 0x07;
	else
		return -1;
	if (len < n)
		return -1;
	for (i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return -1;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
	    (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
		return -1;
	*used = n;
	return cp;
}

/* Characters that move the cursor or reorder text without showing:
 * C1 controls and the Unicode bidi controls (the "Trojan Source" set). */
static int
is_invisible(long cp)
{
	return (cp >= 0x80 && cp <= 0x9f) || cp == 0x061c ||
	    cp == 0x200e || cp == 0x200f || (cp >= 0x202a && cp <= 0x202e) ||
	    (cp >= 0x2066 && cp <= 0x2069);
}

/*
 * One character of s[0..len) as a terminal may show it, into piece
 * (NUL-terminated): itself, or \n \r \t \xHH (C0, DEL, a byte of no
 * valid sequence) \uHHHH (C1, bidi controls), and with backslash set a
 * backslash as \\. Its length; the bytes it took from s in *used.
 */
static size_t
escape_piece(const unsigned char *s, size_t len, size_t *used,
    char piece[16], int backslash)
{
	long cp = utf8_next(s, len, used);

	if (cp < 0)
		return (size_t)snprintf(piece, 16, "\\x%02x", s[0]);
	switch (cp) {
	case '\n':
		return (size_t)snprintf(piece, 16, "\\n");
	case '\r':
		return (size_t)snprintf(piece, 16, "\\r");
	case '\t':
		return (size_t)snprintf(piece, 16, "\\t");
	case '\\':
		if (backslash)
			return (size_t)snprintf(piece, 16, "\\\\");
		break;
	}
	if (cp < 0x20 || cp == 0x7f)
		return (size_t)snprintf(piece, 16, "\\x%02lx", cp);
	if (is_invisible(cp))
		return (size_t)snprintf(piece, 16, "\\u%04lx", cp);
	memcpy(piece, s, *used);
	piece[*used] = '\0';
	return *used;
}

int
sk_escape(char *dst, size_t n, const char *s, size_t len, int flags)
{
	const unsigned char *p = (const unsigned char *)s;
	int bs = (flags & SK_ESCAPE_BACKSLASH) != 0, same = 1;
	char piece[16];
	size_t i, used, k, total = 0, at = 0, room;

	for (i = 0; i < len; i += used) {
		k = escape_piece(p + i, len - i, &used, piece, bs);
		if (k != used || memcmp(piece, p + i, used) != 0)
			same = 0;
		total += k;
	}
	if (n == 0)
		return same;
	room = total < n ? n - 1 : n > 4 ? n - 4 : 0;
	for (i = 0; i < len; i += used) {
		k = escape_piece(p + i, len - i, &used, piece, bs);
		if (at + k > room)
			break;
		memcpy(dst + at, piece, k);
		at += k;
	}
	if (i < len && n > 4) {
		memcpy(dst + at, "...", 3);
		at += 3;
	}
	dst[at] = '\0';
	return same;
}

void
sk__fputs_escaped(const char *s, FILE *f)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t len = strlen(s), i, used;
	char piece[16];

	for (i = 0; i < len; i += used) {
		escape_piece(p + i, len - i, &used, piece, 0);
		fputs(piece, f);
	}
}

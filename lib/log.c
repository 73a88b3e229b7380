/*
 * log.c - leveled messages to stderr. The level is process-wide: set it
 * once at start-up (threads only read it).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static int level = -1;

static const char *names[] = { "error", "warn", "info", "debug" };

static int
env_level(void)
{
	const char *s = getenv("SHARDKIT_LOG");
	int i;

	if (s != NULL) {
		for (i = 0; i < 4; i++)
			if (strcmp(s, names[i]) == 0)
				return i;
	}
	return SK_LOG_WARN;
}

void
sk_log_set_level(int l)
{
	level = l < SK_LOG_ERROR ? SK_LOG_ERROR :
	    l > SK_LOG_DEBUG ? SK_LOG_DEBUG : l;
}

int
sk_log_get_level(void)
{
	if (level < 0)
		level = env_level();
	return level;
}

void
sk_log(int l, const char *fmt, ...)
{
	char buf[1024], shown[2048];
	va_list ap;

	if (l > sk_log_get_level())
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	/* Names and messages from servers are in it: shown escaped. */
	sk_escape(shown, sizeof shown, buf, strlen(buf), 0);
	/* One fprintf, so lines from several threads do not interleave. */
	fprintf(stderr, "shardkit: %s: %s\n", names[l < 0 ? 0 : l > 3 ? 3 : l],
	    shown);
}

/*
 * keys.c - the sample keys of a class-per-folder tree, one rule for
 * "shardtool pack folder" and the loader's files form, so a tree and the
 * shards packed from it give the same keys.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* WebDataset: the key ends at the first dot of the basename, so "a.b.jpg"
 * would become key "a"; the dots of a stem become underscores instead. */
void
sk__stem_key(char *dst, size_t cap, const char *prefix, const char *name)
{
	const char *dot = strrchr(name, '.');
	size_t len = dot && dot != name ? (size_t)(dot - name) : strlen(name);
	size_t i, n;

	n = (size_t)snprintf(dst, cap, "%s%.*s", prefix, (int)len, name);
	for (i = strlen(prefix); i < n && i < cap; i++)
		if (dst[i] == '.')
			dst[i] = '_';
}

struct keyref {
	const char *key;
	size_t i;
};

static int
cmp_keyref(const void *a, const void *b)
{
	const struct keyref *x = a, *y = b;
	int c = strcmp(x->key, y->key);

	return c != 0 ? c : (x->i > y->i) - (x->i < y->i);
}

/*
 * Two files may share a stem (a.jpg, a.png): the one later in name order
 * becomes a_2 (then a_3 ...). Ties are broken by position, not by qsort,
 * and a new name that clashes with a real stem is renamed again.
 */
int
sk__dedupe_keys(char **keys, size_t n, void (*renamed)(size_t i,
    const char *taken, const char *key, void *arg), void *arg)
{
	size_t i, g, dup;
	struct keyref *refs;
	int again;
	char *k;

	do {
		if ((refs = malloc((n ? n : 1) * sizeof *refs)) == NULL)
			return SK_ENOMEM;
		for (i = 0; i < n; i++) {
			refs[i].key = keys[i];
			refs[i].i = i;
		}
		if (n > 1)
			qsort(refs, n, sizeof *refs, cmp_keyref);
		again = 0;
		for (i = 1, g = 0, dup = 1; i < n; i++) {
			/* refs[g] starts the group and keeps its key. */
			if (strcmp(refs[i].key, refs[g].key) != 0) {
				g = i;
				dup = 1;
				continue;
			}
			if ((k = sk__asprintf("%s_%zu", refs[g].key,
			    ++dup)) == NULL) {
				free(refs);
				return SK_ENOMEM;
			}
			if (renamed != NULL)
				renamed(refs[i].i, refs[g].key, k, arg);
			free(keys[refs[i].i]);
			keys[refs[i].i] = k;
			again = 1;
		}
		free(refs);
	} while (again);
	return 0;
}

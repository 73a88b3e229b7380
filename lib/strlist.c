/*
 * strlist.c - a growable array of owned strings.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int
sk_strlist_push(struct sk_strlist *l, const char *s)
{
	char **v;
	size_t cap;

	if (l->n == l->cap) {
		cap = l->cap ? l->cap * 2 : 16;
		v = realloc(l->v, cap * sizeof *v);
		if (v == NULL)
			return SK_ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	if ((l->v[l->n] = strdup(s)) == NULL)
		return SK_ENOMEM;
	l->n++;
	return 0;
}

void
sk_strlist_free(struct sk_strlist *l)
{
	size_t i;

	for (i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	l->v = NULL;
	l->n = l->cap = 0;
}

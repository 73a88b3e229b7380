#!/usr/bin/env bash
# install.sh - "make install DESTDIR=..." installs the tool, the library, its
# header, shardkit.pc and the man pages; a program built against the
# installed header and pkg-config file links and runs; the bash and zsh
# completions are installed and complete from the installed tools.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
need_cmd pkg-config
need_cmd "${CC:-cc}"

D="$T/destdir"
pc="$top_builddir/shardkit.pc"
[ -f "$pc" ] || fail "$pc was not made by configure"
prefix=$(pkg-config --variable=prefix "$pc")
libdir=$(pkg-config --variable=libdir "$pc")
includedir=$(pkg-config --variable=includedir "$pc")
# bindir and mandir are not in the .pc file; take them from the Makefile.
mkvar() {
	sed -n "s|^$1 = ||p" "$top_builddir/Makefile" |
	    sed "s|\${prefix}|$prefix|; s|\${exec_prefix}|$prefix|;
	    s|\${datarootdir}|$prefix/share|"
}
bindir=$(mkvar bindir)
mandir=$(mkvar mandir)
[ -n "$bindir" ] && [ -n "$mandir" ] || fail "no bindir or mandir in the Makefile"
# configure once clobbered libdir with OpenBLAS's own: unless --libdir was
# given, the library goes to PREFIX/lib.
if ! "$top_builddir/config.status" --config | grep -q -- "--libdir"; then
	[ "$libdir" = "$prefix/lib" ] ||
	    fail "libdir is $libdir, not $prefix/lib, without --libdir"
fi

# Not the jobserver of the make check that runs us.
mk() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL "${MAKE:-make}" -C "$top_builddir" "$@"; }

say "make install DESTDIR=$D (prefix $prefix)"
# make check has built the tree. Should a source change meanwhile, make
# install must not relink the tool or the library under the tests running
# beside this one (-o: never remake them).
run_rc 0 install mk -o shardtool/shardtool -o lib/libshardkit.la install \
    DESTDIR="$D"
for f in "$bindir/shardtool" "$includedir/shardkit.h" \
    "$libdir/pkgconfig/shardkit.pc" "$mandir/man1/shardtool.1" \
    "$mandir/man5/shardkit.5"; do
	[ -f "$D$f" ] || fail "make install did not install $f"
done
[ -x "$D$bindir/shardtool" ] || fail "$bindir/shardtool is not executable"
comp="$prefix/share/bash-completion/completions"
for t in shardtool shardload shardtrain shardfs; do
	[ -f "$D$comp/$t" ] || fail "make install did not install $comp/$t"
done

say "bash completes commands and options from the installed tool"
PATH="$D$bindir:$PATH" LD_LIBRARY_PATH="$D$libdir" run_rc 0 comp bash -c '
	source "$1"
	t() { COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); _shardkit
		echo "$* -> ${COMPREPLY[*]}"; }
	t shardtool pa; t shardtool pack --max-c; t shardtool ver
	t shardtool cp --dry' _ \
    "$D$comp/shardtool"
has comp.out "shardtool pa -> pack"
has comp.out "shardtool pack --max-c -> --max-count"
has comp.out "shardtool ver -> verify"
has comp.out "shardtool cp --dry -> --dry-run"

zcomp="$prefix/share/zsh/site-functions"
[ -f "$D$zcomp/_shardkit" ] || fail "make install did not install $zcomp/_shardkit"
head -n 1 "$D$zcomp/_shardkit" | grep -q '^#compdef shardtool shardload shardtrain shardfs$' ||
    fail "$zcomp/_shardkit does not start with its #compdef line"
if command -v zsh >/dev/null; then
	say "zsh completes commands and options from the installed tool"
	# compadd and _files stand in for zsh's own, which need a terminal:
	# they print what would be offered for the word typed so far.
	PATH="$D$bindir:$PATH" LD_LIBRARY_PATH="$D$libdir" run_rc 0 zcomp \
	    zsh -fc '
	fpath=("$1" $fpath)
	autoload -Uz _shardkit
	compadd() { local -a m; m=(${(M)${(P)2}:#${PREFIX}*}); print -r -- "$m"; }
	_files() { print -r -- "(files)"; }
	t() { local -a words; words=("$@"); CURRENT=$#; PREFIX=$words[-1]
		print -rn -- "$* -> "; _shardkit; }
	t shardtool pa; t shardtool pack --max-c; t shardtool c
	t shardtool cp --dry; t shardload bench --work; t shardtool ls x' _ "$D$zcomp"
	has zcomp.out "shardtool pa -> pack"
	has zcomp.out "shardtool pack --max-c -> --max-count"
	has zcomp.out "shardtool c -> cat cp"
	has zcomp.out "shardtool cp --dry -> --dry-run"
	has zcomp.out "shardload bench --work -> --workers"
	has zcomp.out "shardtool ls x -> (files)"
fi
ls "$D$libdir"/libshardkit.so* >/dev/null 2>&1 ||
    fail "make install did not install $libdir/libshardkit.so*"
[ -e "$D$libdir/libshardkit.so" ] || fail "no $libdir/libshardkit.so for -lshardkit"
cmp "$D$includedir/shardkit.h" "$top_srcdir/include/shardkit.h" ||
    fail "the installed shardkit.h is not include/shardkit.h"

say "the installed shardtool runs"
LD_LIBRARY_PATH="$D$libdir" run_rc 0 installed "$D$bindir/shardtool" --version
has installed.out "shardtool"

say "a program compiles and links against the installed header and shardkit.pc"
cat >"$T/prog.c" <<'EOF'
#include <stdio.h>
#include <shardkit.h>

int
main(void)
{
	struct sk_strlist l = { 0 };
	struct sk_error err;
	size_t i;

	if (sk_url_expand("s-{000..002}.tar::t-{a,b}.tar", &l, &err) != 0) {
		fprintf(stderr, "sk_url_expand: %s\n", err.msg);
		return 1;
	}
	for (i = 0; i < l.n; i++)
		printf("%s\n", l.v[i]);
	sk_strlist_free(&l);
	return 0;
}
EOF
export PKG_CONFIG_PATH="$D$libdir/pkgconfig"
export PKG_CONFIG_SYSROOT_DIR="$D"
cflags=$(pkg-config --cflags shardkit) || fail "pkg-config --cflags shardkit"
libs=$(pkg-config --libs shardkit) || fail "pkg-config --libs shardkit"
case $cflags in *"$D"*) ;; *) fail "pkg-config --cflags gives '$cflags', not under $D" ;; esac
# shellcheck disable=SC2086
# A library built with --enable-sanitizers needs its runtime in the program.
san=$(sed -n 's/^SK_CFLAGS = //p' "$top_builddir/Makefile" | tr ' ' '\n' | grep -- '^-fsanitize=' | head -n 1 || true)
run_rc 0 cc "${CC:-cc}" -Wall -Werror $san -o "$T/prog" "$T/prog.c" $cflags $libs
LD_LIBRARY_PATH="$D$libdir" run_rc 0 prog "$T/prog"
printf 's-000.tar\ns-001.tar\ns-002.tar\nt-a.tar\nt-b.tar\n' >"$T/want"
diff -u "$T/want" "$T/prog.out" >&2 || fail "sk_url_expand through the installed library"
echo "PASS: install"

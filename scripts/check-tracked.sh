#!/usr/bin/env bash
# Fails when a tracked file is larger than 2 MB or is an executable binary,
# naming each such file. Build outputs (bin/, /botctl, /load, *.test) are
# ignored by .gitignore; this catches one added anyway. It reads what git
# tracks (the index), not the work tree, so a clean clone and a dirty
# checkout give the same answer.
#
# An executable binary is a file that starts with an ELF, Mach-O or PE
# magic number, or a file git considers binary (not text) that has the
# executable bit. Images and other binary data without the executable bit
# (bench/*.png, docs/*.png) are fine.
#
#   bash scripts/check-tracked.sh         # exit 0: clean; exit 1: offenders listed
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"

limit=$((2 * 1024 * 1024))
bad=0

# One line per tracked file: object, size, mode, binary flag (git's own
# "-text" test on the indexed content: a NUL byte in its first 8000), path.
while IFS=$'\t' read -r obj size mode eol path; do
	case $mode in
	100644 | 100755) ;;
	*) continue ;; # symlinks and submodules have no content of their own
	esac
	if ((size > limit)); then
		echo "check-tracked: $path is $size bytes, over the 2 MB limit for tracked files; remove it (git rm --cached '$path') or keep it out of the repository" >&2
		bad=1
	fi
	# Executable headers hold NUL bytes, so git sees every executable as
	# binary: only binary files need their magic number read.
	[[ $eol == i/-text ]] || continue
	magic=$(git cat-file blob "$obj" | head -c 4 | od -An -tx1 | tr -d ' \n' || true)
	kind=""
	case $magic in
	7f454c46) kind="an ELF executable" ;;
	feedface | feedfacf | cefaedfe | cffaedfe | cafebabe) kind="a Mach-O executable" ;;
	4d5a*) kind="a PE (Windows) executable" ;;
	esac
	if [[ -z $kind && $mode == 100755 ]]; then
		kind="a binary file with the executable bit"
	fi
	if [[ -n $kind ]]; then
		echo "check-tracked: $path is $kind; compiled binaries are not tracked: git rm --cached '$path' and add it to .gitignore" >&2
		bad=1
	fi
done < <(git ls-files -s --eol | awk -F'\t' '{
	split($1, a, " ") # mode object stage
	split($2, e, " ") # i/<eol> w/<eol> attr/...
	printf "%s %s\t%s\t%s\n", a[2], a[1], e[1], $3
}' | git cat-file --batch-check=$'%(objectname)\t%(objectsize)\t%(rest)')

if ((bad)); then
	echo "check-tracked: FAILED (see the files named above)" >&2
	exit 1
fi
echo "check-tracked: ok ($(git ls-files | wc -l) tracked files, none over 2 MB, no executable binaries)"

#!/bin/sh
# unit_variants.sh - the unit tests (unit_core, unit_threads) built under the
# policies of the variant this run preloads (tests/variant-NAME/, see Makefile.am):
# each variant's own core is unit-tested, not only the default's.
. "$(dirname "$0")/testlib.sh"
case ${HZ_TEST_VARIANT:-hakozuna} in
    hakozuna) v=default ;;
    hakozuna_*) v=${HZ_TEST_VARIANT#hakozuna_} ;;
    *) echo "unit_variants.sh: unknown variant $HZ_TEST_VARIANT"; exit 99 ;;
esac
dir="$HZ_BUILDDIR/tests/variant-$v"
[ -d "$dir" ] || { echo "unit_variants.sh: $dir not built"; exit 99; }
for t in unit_core unit_threads; do
    # The unit tests call the hz_* names of the core they link; keep the preloaded
    # library out of their way.
    check "$t ($v policies)" env -u LD_PRELOAD "$dir/$t"
done
finish

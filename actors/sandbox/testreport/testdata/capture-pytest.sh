#!/bin/sh
# capture-pytest.sh OUT [PYTEST ARGS...]: run pytest in the current
# directory with frognano's report plugin (../pytest_plugin.py), writing its
# report to OUT, as sandbox.RunTests does; prints pytest's exit status.
set -u
out=$1
shift
plugin=$(dirname "$0")/../pytest_plugin.py
rm -f "$out"
python3 -c "$(cat "$plugin")
import sys
sys.exit(int(_frognano_pytest.main(sys.argv[2:], plugins=[FrognanoReport(sys.argv[1])])))" "$out" -p no:cacheprovider --rootdir=. "$@" >/dev/null
echo "exit $?"
find . -name __pycache__ -prune -exec rm -rf {} +

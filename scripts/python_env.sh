# Sourced by test.sh and check.sh: sets PY to an interpreter that has the project and its test
# dependencies. The current python3 is used when it already has them (the GPU machine, after
# `pip install --no-deps -e .`); otherwise .venv is created when missing and the project installed
# into it with the test extra, again only when pyproject.toml changed since the last install (a
# stamp keyed on its sha256), so a complete .venv needs no package index.
py="${PYTHON:-python3}"
if [ "${TORCHLEAN_USE_CURRENT_PYTHON:-0}" = "1" ] || "$py" scripts/have_deps.py 2>/dev/null; then
    PY="$py"
else
    if [ ! -x .venv/bin/python ]; then
        "$py" -m venv .venv
    fi
    PY=.venv/bin/python
    stamp=.venv/.torchlean-installed
    want=$("$PY" -c "import hashlib; print(hashlib.sha256(open('pyproject.toml','rb').read()).hexdigest())")
    if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || ! "$PY" scripts/have_deps.py --all 2>/dev/null; then
        "$PY" -m pip install -q --disable-pip-version-check -e '.[test]' && echo "$want" > "$stamp"
    fi
fi
export PY

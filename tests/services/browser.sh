#!/usr/bin/env bash
# A headless browser (Debian's chromium) for tests/report/test_report_browser.py, which renders the
# HTML report in it and checks the page drew: non-blank screenshot, plots present, no
# horizontal scroll at 1400 px.
#
# Usage: tests/services/browser.sh {install|status|path}
#
#   install  apt-get install chromium (and a font) when missing (Debian 12 bookworm and
#            Debian 13 trixie; needs root or sudo -n); quick and quiet when already there
#   status   say whether chromium is installed and runs (exit 0 only if it does)
#   path     print the chromium executable (exit 1 if there is none)
#
# `make test` runs `install` and sets PAL_REQUIRE_BROWSER=1, so there a missing browser fails
# the test instead of skipping it. The test finds chromium on PATH, or at PAL_TEST_CHROMIUM.

set -euo pipefail

PROG="browser"
# shellcheck source=tests/services/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

chromium_path() {
    if [ -n "${PAL_TEST_CHROMIUM:-}" ]; then
        [ -x "$PAL_TEST_CHROMIUM" ] || return 1
        printf '%s\n' "$PAL_TEST_CHROMIUM"
        return 0
    fi
    find_cmd chromium chromium-browser
}

cmd_install() {
    local pkgs=()
    if ! chromium_path >/dev/null; then pkgs+=(chromium); fi
    # chromium draws text with fontconfig's fonts; a bare container may have none
    if ! compgen -G "/usr/share/fonts/truetype/dejavu/DejaVuSans*.ttf" >/dev/null; then pkgs+=(fonts-dejavu-core); fi
    if [ "${#pkgs[@]}" -eq 0 ]; then
        log "install: chromium is already installed ($(chromium_path))"
        return 0
    fi
    apt_install "${pkgs[@]}"
    chromium_path >/dev/null || die "chromium installed but no chromium executable found"
    log "install: done ($(chromium_path))"
}

cmd_status() {
    local exe version
    if ! exe="$(chromium_path)"; then
        echo "chromium: not installed (tests/services/browser.sh install)"
        return 1
    fi
    if ! version="$(timeout 30 "$exe" --version 2>/dev/null)"; then
        echo "chromium: $exe does not run"
        return 1
    fi
    echo "chromium: $version ($exe)"
}

cmd_path() {
    chromium_path || { log "no chromium (tests/services/browser.sh install)"; return 1; }
}

usage() {
    echo "usage: $0 {install|status|path}" >&2
}

main() {
    if [ "$#" -ne 1 ]; then usage; exit 2; fi
    case "$1" in
        install) cmd_install ;;
        status) cmd_status ;;
        path) cmd_path ;;
        -h | --help | help) usage ;;
        *) usage; die "unknown command '$1'" ;;
    esac
}

main "$@"

#!/bin/sh
# Container entrypoint: run the service named by VERILIVE_SERVICE (face, voice, capture or all).
# exec: verilive becomes PID 1 and receives SIGTERM itself, so in-flight requests finish.
set -eu
case "${VERILIVE_SERVICE:-}" in
  face|voice|capture|all) ;;
  *) echo "VERILIVE_SERVICE must be face, voice, capture or all (got '${VERILIVE_SERVICE:-}')" >&2; exit 64 ;;
esac
exec verilive serve "${VERILIVE_SERVICE}" "$@"

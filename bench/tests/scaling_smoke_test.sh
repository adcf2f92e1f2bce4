#!/usr/bin/env bash
# placeholder: replaced by the smoke test of meshbench scaling
echo "not written yet"; exit 1

#!/usr/bin/env bash
# Runs a command under the Khronos validation layer with synchronization validation and
# fails on any message the layer gives, also those it gives after the program's last
# backend call (when the device and instance are destroyed): EXAPT_VK_VALIDATION=sync turns
# both on and makes any message fail the next backend call; a layer settings file
# (VK_LAYER_SETTINGS_PATH) has the layer print every message to stdout as well, where this
# script looks for any warning or error, and for proof that synchronization validation
# was on in every instance.
# Usage: vk_validate.sh COMMAND [ARGS...]
set -uo pipefail
dir=$(mktemp -d "${TMPDIR:-/tmp}/exapt-vkval-XXXXXX")
trap 'rm -rf "$dir"' EXIT
log=$dir/out.log
cat >"$dir/vk_layer_settings.txt" <<EOF
khronos_validation.enables = VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT
khronos_validation.debug_action = VK_DBG_LAYER_ACTION_LOG_MSG
khronos_validation.report_flags = error,warn,perf,info
khronos_validation.log_filename = stdout
khronos_validation.enable_message_limit = false
EOF
VK_LAYER_SETTINGS_PATH=$dir/vk_layer_settings.txt EXAPT_VK_VALIDATION=sync "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then
    echo "vk_validate: '$*' failed ($rc)"
    exit "$rc"
fi
active=$(grep -c "Khronos Validation Layer Active" "$log")
synced=$(grep -c "Current Enables:.*SYNCHRONIZATION_VALIDATION" "$log")
if [ "$active" -eq 0 ] || [ "$synced" -ne "$active" ]; then
    echo "vk_validate: synchronization validation was on in $synced of $active layer instances"
    exit 1
fi
if grep -qE "\((ERROR|WARN) / " "$log"; then
    echo "vk_validate: the validation layer reported:"
    grep -E "\((ERROR|WARN) / " "$log" | head -20
    exit 1
fi
echo "vk_validate: no validation message in $active layer instances, synchronization validation on in all"

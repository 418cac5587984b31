#!/usr/bin/env bash
# Imports the Developer ID certificate into a keychain of its own for the rest of a macOS job,
# where codesign finds it (site_scons/backends/steps/sign.py): $DEV_ID_APP_CERT is the base64 .p12,
# $DEV_ID_APP_PWD its password. The commands GitHub documents for Apple certificates on macOS
# runners, in place of a third-party action in a job that holds the signing secrets.
set -euo pipefail
: "${DEV_ID_APP_CERT:?the base64 of the .p12}" "${DEV_ID_APP_PWD:?the .p12 password}" "${RUNNER_TEMP:?}"
keychain="$RUNNER_TEMP/anira-signing.keychain-db"
certificate="$RUNNER_TEMP/anira-signing.p12"
trap 'rm -f "$certificate"' EXIT
password=$(openssl rand -hex 24)
printf '%s' "$DEV_ID_APP_CERT" | base64 --decode > "$certificate"
security create-keychain -p "$password" "$keychain"
security set-keychain-settings -lut 21600 "$keychain"
security unlock-keychain -p "$password" "$keychain"
security import "$certificate" -P "$DEV_ID_APP_PWD" -A -t cert -f pkcs12 -k "$keychain"
security set-key-partition-list -S apple-tool:,apple: -k "$password" "$keychain" > /dev/null
# Searched first, then the user's keychains as they were.
keychains=("$keychain")
while IFS= read -r listed; do
  keychains+=("$listed")
done < <(security list-keychains -d user | sed -e 's/^[[:space:]]*"//' -e 's/"[[:space:]]*$//')
security list-keychains -d user -s "${keychains[@]}"
echo "imported the Developer ID certificate into $keychain"

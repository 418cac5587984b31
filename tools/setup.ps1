<#
.SYNOPSIS
Sets up a Windows machine for anira-backends: the project's Python environment, then what each
leg given with -Leg needs on this machine.

.DESCRIPTION
Makes .venv (or uses the active virtual environment) from Python 3.11 or newer and installs
requirements.txt (requirements-dev.txt with -Dev) into it. For each -Leg, `python -m
backends.commands.host_setup` works out from the leg's plan what it needs here (docs/setup.md): the
MSVC compiler for the leg's target and the Windows SDK, looked up in the Visual Studio
instances vswhere lists (Build Tools included), the SDK libraries an accelerator links
(DirectML's d3d12 and dxgi), CMake, Ninja, Git, LLVM and Bazelisk on PATH. This script installs
only the Python packages among them, into the environment; for everything else the report
names the exact command (winget, or the Visual Studio Installer's `modify --add`), and the
command that enters the MSVC developer environment to build from. Exit 1 while a leg still
misses something. -Check changes nothing. Debian, Ubuntu and macOS: tools/setup.sh.

.EXAMPLE
powershell -ExecutionPolicy Bypass -File tools\setup.ps1 -Leg onnxruntime-windows-arm64-gpu-shared
#>
param(
    [string[]]$Leg = @(),
    [switch]$Dev,
    [switch]$Check
)
Set-StrictMode -Version 3.0
$ErrorActionPreference = 'Stop'
$Root = Split-Path -Parent $PSScriptRoot
Set-Location $Root

# Whether the command starts a Python 3.11 or newer (a py launcher without one fails; its
# message to stderr would stop this script, so it is caught).
function Test-Python([string]$Program, [string[]]$Arguments) {
    if (-not (Get-Command $Program -ErrorAction SilentlyContinue)) { return $false }
    try {
        & $Program @Arguments -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>$null
        return $LASTEXITCODE -eq 0
    } catch {
        return $false
    }
}

# A Python 3.11 or newer, as the command and arguments that start it: $env:PYTHON, the py
# launcher's newest 3.x, or python on PATH; $null when there is none.
function Find-Python {
    $candidates = @()
    if ($env:PYTHON) { $candidates += , @($env:PYTHON) }
    $candidates += , @('py', '-3')
    $candidates += , @('python')
    foreach ($candidate in $candidates) {
        if (Test-Python $candidate[0] @($candidate | Select-Object -Skip 1)) { return , $candidate }
    }
    return $null
}

$venv = if ($env:VIRTUAL_ENV) { $env:VIRTUAL_ENV } else { Join-Path $Root '.venv' }
$python = Join-Path $venv 'Scripts\python.exe'
$requirements = if ($Dev) { 'requirements-dev.txt' } else { 'requirements.txt' }

if (-not ((Test-Path $python) -and (Test-Python $python @()))) {
    if ($Check) {
        Write-Output "setup --check: $venv would be made from a Python 3.11 or newer, then $requirements installed"
        exit 0
    }
    $base = Find-Python
    if ($null -eq $base) {
        [Console]::Error.WriteLine("tools/setup.ps1: anira-backends needs Python 3.11 or newer and found none " +
            "(`$env:PYTHON, py -3, python): install one (winget install --id Python.Python.3.12 -e), open a new " +
            "shell and run tools\setup.ps1 again")
        exit 1
    }
    if (Test-Path $venv) { Remove-Item -Recurse -Force $venv }  # broken, or made from an older Python
    $program = $base[0]
    $arguments = @($base | Select-Object -Skip 1)
    & $program @arguments -m venv $venv
    if ($LASTEXITCODE -ne 0) { exit $LASTEXITCODE }
}
if (-not $Check) {
    & $python -m pip install -q --disable-pip-version-check -r $requirements
    if ($LASTEXITCODE -ne 0) { exit $LASTEXITCODE }
    Write-Output "setup: $(& $python --version) in $venv"
}
if ($Leg.Count -eq 0) { exit 0 }

# What the legs need here, decided in Python from their plans (the same answer CI's set-up and
# the build's own check give); vswhere is where the Visual Studio Installer keeps it.
$env:PYTHONPATH = Join-Path $Root 'site_scons'
$vswhere = Join-Path ${env:ProgramFiles(x86)} 'Microsoft Visual Studio\Installer\vswhere.exe'
$hostSetup = @('-m', 'backends.commands.host_setup', '--vswhere', $vswhere)
foreach ($id in $Leg) { $hostSetup += @('--leg', $id) }
if (-not $Check) {
    $listed = & $python @hostSetup --missing pip
    if ($LASTEXITCODE -ne 0) { exit $LASTEXITCODE }
    $packages = @("$listed".Split(' ', [StringSplitOptions]::RemoveEmptyEntries))
    if ($packages.Count -gt 0) {
        Write-Output "setup: installing into ${venv}: $($packages -join ' ')"
        & $python -m pip install -q --disable-pip-version-check @packages
        if ($LASTEXITCODE -ne 0) { exit $LASTEXITCODE }
    }
}
& $python @hostSetup  # the legs' reports: what is there, and exactly what to install for the rest
exit $LASTEXITCODE

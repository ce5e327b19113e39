#!/usr/bin/python3
"""Probes the virtual BMC with OpenStack Ironic's Redfish client (sushy),
the way Ironic's redfish driver uses it. One line per probe: "PASS name" or
"FAIL name: error". Exit status 0 when every probe passed.

Usage: sushy_probe.py URL USER PASSWORD
"""
import sys
import traceback
import warnings

warnings.filterwarnings("ignore")

import sushy  # noqa: E402

url, user, password = sys.argv[1:4]
results = []


def probe(name):
    def wrap(fn):
        try:
            fn()
            results.append((name, None))
        except Exception as e:  # every failure is a probe result
            results.append((name, "%s: %s" % (type(e).__name__, e)))
            traceback.print_exc(file=sys.stderr)
        return fn
    return wrap


ctx = {}


@probe("connect")
def _():
    ctx["root"] = sushy.Sushy(url, username=user, password=password)


@probe("systems")
def _():
    members = ctx["root"].get_system_collection().get_members()
    assert members, "no systems"
    ctx["sys"] = members[0]


@probe("power_state")
def _():
    assert ctx["sys"].power_state in (sushy.POWER_STATE_ON, sushy.POWER_STATE_OFF), ctx["sys"].power_state


@probe("allowed_reset_values")
def _():
    v = ctx["sys"].get_allowed_reset_system_values()
    assert sushy.RESET_ON in v and sushy.RESET_FORCE_OFF in v, v


@probe("power_on")
def _():
    ctx["sys"].reset_system(sushy.RESET_ON)
    ctx["sys"].refresh()
    assert ctx["sys"].power_state == sushy.POWER_STATE_ON, ctx["sys"].power_state


@probe("allowed_boot_sources")
def _():
    v = ctx["sys"].get_allowed_system_boot_source_values()
    assert sushy.BOOT_SOURCE_TARGET_PXE in v and sushy.BOOT_SOURCE_TARGET_HDD in v, v


@probe("boot_once_pxe")
def _():
    ctx["sys"].set_system_boot_options(sushy.BOOT_SOURCE_TARGET_PXE, enabled=sushy.BOOT_SOURCE_ENABLED_ONCE)
    ctx["sys"].refresh()
    b = ctx["sys"].boot
    assert b.target == sushy.BOOT_SOURCE_TARGET_PXE and b.enabled == sushy.BOOT_SOURCE_ENABLED_ONCE, (b.target, b.enabled)


@probe("boot_persistent_hdd")
def _():
    ctx["sys"].set_system_boot_options(sushy.BOOT_SOURCE_TARGET_HDD, enabled=sushy.BOOT_SOURCE_ENABLED_CONTINUOUS)
    ctx["sys"].refresh()
    b = ctx["sys"].boot
    assert b.target == sushy.BOOT_SOURCE_TARGET_HDD and b.enabled == sushy.BOOT_SOURCE_ENABLED_CONTINUOUS, (b.target, b.enabled)


@probe("force_restart")
def _():
    ctx["sys"].reset_system(sushy.RESET_FORCE_RESTART)


@probe("managers")
def _():
    members = ctx["root"].get_manager_collection().get_members()
    assert members, "no managers"
    ctx["mgr"] = members[0]
    assert ctx["mgr"].firmware_version


@probe("manager_reset_values")
def _():
    v = ctx["mgr"].get_allowed_reset_manager_values()
    assert v, "no manager reset values"


@probe("bios_attributes")
def _():
    ctx["bios"] = ctx["sys"].bios
    assert ctx["bios"].attributes, "no BIOS attributes"


@probe("bios_set_attributes")
def _():
    ctx["bios"].set_attributes({"ProcTurboMode": "Disabled"})


@probe("bios_pending")
def _():
    ctx["bios"].refresh()
    p = ctx["bios"].pending_attributes
    assert p.get("ProcTurboMode") == "Disabled", p


@probe("bios_set_empty")
def _():
    # Ironic applies an empty settings list as a PATCH with "Attributes": {}.
    ctx["bios"].set_attributes({})


@probe("update_service")
def _():
    us = ctx["root"].get_update_service()
    ctx["us"] = us
    assert us.service_enabled is not False


@probe("firmware_inventory")
def _():
    inv = ctx["us"].firmware_inventory.get_members()
    assert inv and all(i.version for i in inv), [(i.identity, i.version) for i in inv]


@probe("power_off")
def _():
    ctx["sys"].reset_system(sushy.RESET_FORCE_OFF)
    ctx["sys"].refresh()
    assert ctx["sys"].power_state == sushy.POWER_STATE_OFF, ctx["sys"].power_state


failed = 0
for name, err in results:
    if err is None:
        print("PASS", name)
    else:
        failed += 1
        print("FAIL %s: %s" % (name, err))
print("%d/%d probes passed" % (len(results) - failed, len(results)))
sys.exit(1 if failed else 0)

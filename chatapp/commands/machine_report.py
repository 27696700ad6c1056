"""`chatapp machine`: usable cores, caches, and the two speed ceilings measured here."""

from __future__ import annotations

import json

from chatapp import ceilings, cpus, machine


def machine_facts(measure: bool) -> dict:
    """This machine's facts; the ceilings as saved, measured now when asked or never before
    (each kept at the best measured: ceilings.best_of)."""
    saved = machine.saved_ceilings()
    if measure or saved is None:
        saved = ceilings.best_of(saved, ceilings.measure(cpus.usable_cpus()))
        machine.remember_ceilings(saved)
    return {
        "cpu": machine.cpu_name(),
        "cpus": cpus.machine_cpus(),
        "usable_cpus": cpus.usable_cpus(),
        "caches": machine.cpu_caches(),
        "ceilings": saved,
    }


def _size(n: int) -> str:
    return f"{n // 1024**2} MiB" if n >= 1024**2 else f"{n // 1024} KiB"


def machine_text(facts: dict) -> str:
    """The facts as lines for a terminal (all plain text: no markup)."""
    c = facts["ceilings"]
    caches = ", ".join(
        f"L{x['level']} {x['type'].lower()} {_size(x['bytes'])}" for x in facts["caches"]
    )
    return "\n".join(
        [
            f"cpu              {facts['cpu']}",
            f"cores            {facts['usable_cpus']} usable of {facts['cpus']}",
            f"caches           {caches or 'not known here'}",
            f"memory read      {c['mem_read_gbps']:.1f} GB/s ({c['read_method']})",
            f"arithmetic peak  {c['compute_gflops']:.1f} GFLOP/s ({c['compute_method']})",
            f"measured         {c['measured_at']} in {c['seconds']:.1f} s",
            "decode reads every weight once a token: its speed is at most the memory read "
            "speed / the model's bytes per token",
        ]
    )


def run_machine(measure: bool, as_json: bool) -> int:
    facts = machine_facts(measure)
    print(json.dumps(facts, indent=2) if as_json else machine_text(facts))
    return 0

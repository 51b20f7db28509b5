"""Built-in device profiles: leave-one-out error of each on its published measurements.

For every profile, every anchor model is held out in turn, the per-op scales are fitted on the
other models, and the held-out model's measured latency is predicted. Prints one row per
anchor and a summary per profile.

    python3 -m bench.device_profiles
"""

from __future__ import annotations

from tinytune.hwmodels.builtin_devices import builtin_profiles


def main() -> None:
    for name, p in sorted(builtin_profiles().items()):
        print(f"\n{name}: {p.core} @ {p.clock_hz / 1e6:.0f} MHz — {p.source}")
        print(f"  {'model':40s} {'engine':34s} {'measured':>10s} {'LOO pred':>10s} {'err':>7s}")
        for c in p.calibration:
            if c.loo_predicted_s is None:
                continue
            err = c.loo_predicted_s / c.measured_s - 1
            print(
                f"  {c.model[:40]:40s} {c.engine[:34]:34s} {1000 * c.measured_s:9.2f}ms "
                f"{1000 * c.loo_predicted_s:9.2f}ms {100 * err:+6.1f}%"
            )
        if p.loo_median_error is not None and p.loo_within_10 is not None:
            print(
                f"  leave-one-out over {len(p.calibration)} measurements: median |error| "
                f"{100 * p.loo_median_error:.1f} %, within ±10 %: {100 * p.loo_within_10:.0f} %"
            )


if __name__ == "__main__":
    main()

/** Records per second per counter over a sliding window of samples (the live view, the dashboard and GET /stats share one). */

/** The span rates are measured over. */
export const RATE_WINDOW_MS = 5_000;
/** Samples closer together than this replace the newest (many readers at once add no samples). */
const MIN_SAMPLE_GAP_MS = 200;

interface Sample {
  readonly at: number;
  readonly counts: Readonly<Record<string, number>>;
}

export class RateMeter {
  private samples: Sample[] = [];

  constructor(private readonly windowMs = RATE_WINDOW_MS) {}

  /** Records `counts` at `at`; per counter, the rate between the oldest sample in the window and this one (0 with no earlier sample). */
  sample(at: number, counts: Readonly<Record<string, number>>): Record<string, number> {
    const last = this.samples.at(-1);
    if (last && at - last.at < MIN_SAMPLE_GAP_MS && this.samples.length > 1) this.samples.pop();
    this.samples.push({ at, counts: { ...counts } });
    // The oldest sample kept is the last one at or before the window's start, so the span covers the window.
    while (this.samples.length > 2 && this.samples[1].at <= at - this.windowMs) this.samples.shift();
    const first = this.samples[0];
    const dt = (at - first.at) / 1000;
    const rates: Record<string, number> = {};
    for (const [name, n] of Object.entries(counts)) rates[name] = dt > 0 ? Math.max(0, (n - (first.counts[name] ?? 0)) / dt) : 0;
    return rates;
  }
}

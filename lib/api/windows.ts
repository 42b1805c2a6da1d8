/**
 * Window assigners. Exact semantics (documented in docs/ARCHITECTURE.md):
 * - a window is the half-open interval [start, end), aligned to epoch 0 (plus an optional offset);
 * - tumbling(size): t belongs to the window starting at t - ((t - offset) mod size);
 * - sliding(size, slide): t belongs to every window whose start is a multiple of slide
 *   (plus offset) with t - size < start <= t; the slide need not divide the size;
 * - session(gap): each record opens [t, t + gap); windows of one key that overlap or
 *   touch merge, so two records are in one session iff they are at most `gap` apart.
 * A window fires when the watermark reaches end - 1 (no record at or before it is
 * still to come); its results carry timestamp end - 1.
 */

export interface TimeWindow {
  readonly start: number;
  readonly end: number;
}

export type WindowAssigner =
  | { readonly kind: 'tumbling'; readonly size: number; readonly offset: number }
  | { readonly kind: 'sliding'; readonly size: number; readonly slide: number; readonly offset: number }
  | { readonly kind: 'session'; readonly gap: number };

function positiveInt(what: string, v: number): number {
  if (!Number.isSafeInteger(v) || v <= 0) {
    throw new RangeError(`${what}: expected a positive integer number of milliseconds, received ${v}`);
  }
  return v;
}

export const Windows = {
  tumbling(sizeMs: number, options: { offsetMs?: number } = {}): WindowAssigner {
    return { kind: 'tumbling', size: positiveInt('tumbling window size', sizeMs), offset: options.offsetMs ?? 0 };
  },
  sliding(sizeMs: number, slideMs: number, options: { offsetMs?: number } = {}): WindowAssigner {
    return {
      kind: 'sliding',
      size: positiveInt('sliding window size', sizeMs),
      slide: positiveInt('sliding window slide', slideMs),
      offset: options.offsetMs ?? 0,
    };
  },
  session(gapMs: number): WindowAssigner {
    return { kind: 'session', gap: positiveInt('session gap', gapMs) };
  },
};

/** Start of the window of length `period` (aligned to offset) that contains t; correct for negative t. */
export function windowStartFor(t: number, period: number, offset = 0): number {
  const rem = (t - offset) % period;
  return t - (rem < 0 ? rem + period : rem);
}

/** The windows a timestamp belongs to, latest start first (sessions: the record's own proto-window). */
export function assignWindows(assigner: WindowAssigner, t: number): TimeWindow[] {
  switch (assigner.kind) {
    case 'tumbling': {
      const start = windowStartFor(t, assigner.size, assigner.offset);
      return [{ start, end: start + assigner.size }];
    }
    case 'sliding': {
      const out: TimeWindow[] = [];
      for (let start = windowStartFor(t, assigner.slide, assigner.offset); start > t - assigner.size; start -= assigner.slide) {
        out.push({ start, end: start + assigner.size });
      }
      return out;
    }
    case 'session':
      return [{ start: t, end: t + assigner.gap }];
  }
}

/** Flink's TimeWindow.intersects: overlapping or touching windows merge. */
export function windowsTouch(a: TimeWindow, b: TimeWindow): boolean {
  return a.start <= b.end && b.start <= a.end;
}

export function windowCover(a: TimeWindow, b: TimeWindow): TimeWindow {
  return { start: Math.min(a.start, b.start), end: Math.max(a.end, b.end) };
}

/** The last timestamp inside the window: the watermark at which it fires. */
export function windowMaxTimestamp(w: TimeWindow): number {
  return w.end - 1;
}

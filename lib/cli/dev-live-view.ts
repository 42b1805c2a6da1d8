/**
 * The live view of `sluice dev`, drawn from the same DevStatus snapshot as GET /stats and
 * the dashboard. In a terminal it is a block redrawn in place (log-update) on stderr, with
 * messages and the job's stdout records scrolling above it; elsewhere (a pipe, a file, CI)
 * one line, at most every few seconds and only when a counter moved (or once a minute).
 */
import type { Writable } from 'node:stream';
import { createLogUpdate } from 'log-update';
import { deadLetterCount, lateDroppedCount, shedTotal } from './dead-letter-report.ts';
import { fmt } from './options.ts';
import type { DevStatus } from './status-shape.ts';

/** "13 rejected (8 invalid, 5 over the bounds (429)), 2 requests refused unread (400/413/415)" */
export function describeRejected(r: DevStatus['rejected']): string {
  const parts: string[] = [];
  if (r.invalid) parts.push(`${fmt.int(r.invalid)} invalid`);
  if (r.overBounds) parts.push(`${fmt.int(r.overBounds)} over the bounds (429)`);
  let text = `${fmt.int(r.invalid + r.overBounds)} rejected`;
  if (parts.length) text += ` (${parts.join(', ')})`;
  if (r.requestsRefused) text += `, ${fmt.int(r.requestsRefused)} request${r.requestsRefused === 1 ? '' : 's'} refused unread (400/413/415)`;
  return text;
}

/** The counters every view shows, in one phrase: records ingested, rejected, dead letters, late dropped, shed (once any were), queued, lag. */
export function countersPhrase(s: DevStatus): string {
  return (
    `${fmt.int(s.recordsIngested)} records ingested, ${describeRejected(s.rejected)}, ${deadLetterCount(s.deadLetters, s.deadLetterFile ?? undefined)}, ` +
    `${lateDroppedCount(s.lateDropped)}, ${s.shedTotal ? `${shedCount(s.shed)}, ` : ''}queued ${fmt.int(s.queuedRecords)}, lag ${fmt.span(s.lagMs)}`
  );
}

/** "12 shed by load shedding (events: newest 12)". */
export function shedCount(shed: DevStatus['shed']): string {
  const parts = Object.entries(shed).map(([stream, byReason]) => `${stream}: ${Object.entries(byReason).map(([r, n]) => `${r} ${fmt.int(n)}`).join(', ')}`);
  return `${fmt.int(shedTotal(shed))} shed by load shedding${parts.length ? ` (${parts.join('; ')})` : ''}`;
}

function watermarkText(st: DevStatus['stages'][number]): [string, string] {
  if (st.endOfInput) return ['end of input', '-'];
  if (st.watermark === null) return ['-', '-'];
  return [new Date(st.watermark).toISOString(), fmt.span(st.watermarkLagMs ?? 0)];
}

/** The terminal block: the counters, then per operator and per stage. */
export function liveBlock(s: DevStatus): string[] {
  const lines = [`-- ${fmt.clock(s.at)}  ${countersPhrase(s)}`];
  lines.push(`   ${'operator'.padEnd(24)} ${'records in'.padStart(12)} ${'in/s'.padStart(9)} ${'out/s'.padStart(9)} ${'late'.padStart(7)}`);
  for (const o of s.operators) {
    const out = o.outPerSecond === null ? '-' : fmt.int(o.outPerSecond);
    lines.push(`   ${o.name.padEnd(24)} ${fmt.int(o.recordsIn).padStart(12)} ${fmt.int(o.inPerSecond).padStart(9)} ${out.padStart(9)} ${fmt.int(o.lateDropped).padStart(7)}`);
  }
  lines.push(`   ${'stage'.padEnd(24)} ${'queued'.padStart(9)} ${'fill'.padStart(5)} ${'watermark'.padStart(24)}  event-time lag`);
  for (const st of s.stages) {
    const [wm, lag] = watermarkText(st);
    lines.push(`   ${st.name.padEnd(24)} ${fmt.int(st.queuedRecords).padStart(9)} ${`${Math.round(st.queueFill * 100)}%`.padStart(5)} ${wm.padStart(24)}  ${lag}`);
  }
  const last = s.checkpoints?.timeline.at(-1);
  if (last) lines.push(`   checkpoint ${last.epoch}: ${last.status}${last.durationMs !== null ? `, ${fmt.int(last.durationMs)} ms` : ''}${last.bytes !== null ? `, ${fmt.int(last.bytes)} bytes` : ''}`);
  return lines;
}

/** The line printed where stderr is not a terminal. */
export function liveLine(s: DevStatus): string {
  const rate = s.operators.filter((o) => o.kind === 'source').reduce((n, o) => n + o.inPerSecond, 0);
  const wms = s.stages.map((st) => `${st.name} ${watermarkText(st)[0]}`).join(', ');
  return `-- ${fmt.clock(s.at)}  ${countersPhrase(s)}; ${fmt.int(rate)} records/s; watermark ${wms}`;
}

/** Where the live view and the messages of `sluice dev` go. */
export interface LiveRenderer {
  /** A new snapshot of the view. */
  frame(s: DevStatus): void;
  /** A message kept in the scrollback (above the block in a terminal). */
  message(line: string): void;
  /** Leaves the last frame on screen and stops redrawing. */
  done(): void;
}

export interface RendererOptions {
  /** Default process.stderr. */
  readonly stream?: Writable & { isTTY?: boolean };
  /** Whether to redraw in place; default: the stream is a terminal. */
  readonly tty?: boolean;
  /** Non-terminal: the shortest gap between two lines (default 2 s) and the longest without one (default 60 s). */
  readonly minGapMs?: number;
  readonly maxGapMs?: number;
  /** Terminal: the stream the job's stdout sinks write to, cleared around (default process.stdout when it is a terminal too). */
  readonly shared?: Writable & { isTTY?: boolean; write: Writable['write'] };
}

export function liveRenderer(options: RendererOptions = {}): LiveRenderer {
  const stream = options.stream ?? process.stderr;
  const tty = options.tty ?? stream.isTTY === true;
  return tty ? new TerminalRenderer(stream, options.shared ?? (process.stdout.isTTY ? process.stdout : undefined)) : new LineRenderer(stream, options.minGapMs ?? 2_000, options.maxGapMs ?? 60_000);
}

class LineRenderer implements LiveRenderer {
  private lastAt = -Infinity;
  private lastCounters = '';

  constructor(
    private readonly stream: Writable,
    private readonly minGapMs: number,
    private readonly maxGapMs: number,
  ) {}

  frame(s: DevStatus): void {
    const gap = s.at - this.lastAt;
    if (gap < this.minGapMs) return;
    const line = liveLine(s);
    // The line without its time: printed again only once something moved.
    const counters = line.slice(line.indexOf('  '));
    if (counters === this.lastCounters && gap < this.maxGapMs) return;
    this.lastAt = s.at;
    this.lastCounters = counters;
    this.stream.write(line + '\n');
  }

  message(line: string): void {
    this.stream.write(line + '\n');
  }

  done(): void {}
}

class TerminalRenderer implements LiveRenderer {
  private readonly update: ReturnType<typeof createLogUpdate>;
  private text = '';
  private readonly restore?: () => void;

  constructor(
    private readonly stream: Writable,
    shared?: Writable & { write: Writable['write'] },
  ) {
    this.update = createLogUpdate(stream as NodeJS.WriteStream, { showCursor: true });
    if (shared && shared !== stream) {
      // The job's records on stdout scroll above the block: clear it, write, draw it again.
      const write = shared.write.bind(shared) as (...a: unknown[]) => boolean;
      shared.write = ((...args: unknown[]) => {
        this.update.clear();
        const ok = write(...args);
        if (this.text) this.update(this.text);
        return ok;
      }) as Writable['write'];
      this.restore = () => (shared.write = write as Writable['write']);
    }
  }

  frame(s: DevStatus): void {
    this.text = liveBlock(s).join('\n');
    this.update(this.text);
  }

  message(line: string): void {
    this.update.clear();
    this.stream.write(line + '\n');
    if (this.text) this.update(this.text);
  }

  done(): void {
    this.update.done();
    this.text = '';
    this.restore?.();
  }
}

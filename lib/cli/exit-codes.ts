/**
 * What the `sluice` command's exit code says happened (README, "The CLI"). Scripts branch
 * on these, so they do not change: a new outcome gets a new code.
 */
export const EXIT = {
  /** Done, nothing rejected or dead-lettered (or the user allowed it). */
  ok: 0,
  /** The command failed: a bad flag value, a missing file, a job that does not build, a runtime or AWS error. */
  error: 1,
  /** The command line could not be parsed: unknown command or option, missing argument or required option, a value not among the choices. */
  usage: 2,
  /** Completed, but input was rejected or records were dead-lettered (see --allow-rejects, --allow-dead-letters). */
  rejects: 3,
} as const;

/** Whether a completed run's rejections or dead letters make it exit with EXIT.rejects. */
export interface RejectPolicy {
  /** Exit 0 even when input lines or events were rejected. */
  allowRejects?: boolean;
  /** Exit 0 even when records or timers were dead-lettered. */
  allowDeadLetters?: boolean;
}

export function outcomeCode(counts: { rejected: number; deadLetters: number }, policy: RejectPolicy = {}): number {
  if (counts.rejected > 0 && !policy.allowRejects) return EXIT.rejects;
  if (counts.deadLetters > 0 && !policy.allowDeadLetters) return EXIT.rejects;
  return EXIT.ok;
}

/** --allow-rejects (and, where records can be dead-lettered, --allow-dead-letters). */
export function addRejectPolicyOptions<C extends { option(flags: string, description: string): C }>(cmd: C, deadLetters = true): C {
  cmd.option('--allow-rejects', `exit ${EXIT.ok} even when input was rejected (otherwise ${EXIT.rejects})`);
  return deadLetters ? cmd.option('--allow-dead-letters', `exit ${EXIT.ok} even when records or timers were dead-lettered (otherwise ${EXIT.rejects})`) : cmd;
}

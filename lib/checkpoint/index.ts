/** The checkpoint coordinator protocol: pure types and decisions; drivers do the I/O. */
export * from './protocol.ts';
export * from './errors.ts';
export { abort, createCoordinator, decide, onCommitted, openEpoch, recordAck, requestSavepoint, toRecord } from './coordinator.ts';
export { resume } from './resume.ts';
export { buildManifest, partitionsNeedingFull, retain } from './manifest.ts';
export * from './cost.ts';

/** What the CLI prints: text from runs made inert first, colour only where a person reads it. */
import { type Painter, colourEnabled, inert, painter } from './terminal';

export const paintOut: Painter = painter(colourEnabled(process.stdout));
export const paintErr: Painter = painter(colourEnabled(process.stderr));

/** Human output: text from runs is made inert first, then coloured where that helps. */
export function say(text: string, colour: (inertText: string) => string = (t) => t): void {
  process.stdout.write(`${colour(inert(text))}\n`);
}

export function json(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

export function warn(text: string): void {
  process.stderr.write(`${paintErr('yellow', 'flotilla: warning:')} ${inert(text)}\n`);
}

/** The status's phase in the colour of how it is going. */
export function paintPhase(text: string): string {
  return text.replace(/^(phase:\s+)(\S+)/m, (_all, label: string, phase: string) => {
    const style =
      phase === 'done'
        ? 'green'
        : phase === 'failed' || phase === 'cancelled'
          ? 'red'
          : phase.startsWith('awaiting')
            ? 'yellow'
            : 'bold';
    return label + paintOut(style, phase);
  });
}

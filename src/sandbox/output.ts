/** What an exec keeps of a command's output, whichever provider ran it. */

/** Output kept in ExecResult.output; more is only streamed through onOutput. */
export const OUTPUT_CAP = 1024 * 1024;

/** The output kept for ExecResult: its last OUTPUT_CAP characters; onOutput sees all of it. */
export class OutputTail {
  private text = '';

  constructor(private readonly onOutput?: (chunk: string) => void) {}

  readonly push = (chunk: string): void => {
    if (!chunk) return;
    this.text += chunk;
    if (this.text.length > OUTPUT_CAP * 2) this.text = this.text.slice(-OUTPUT_CAP);
    this.onOutput?.(chunk);
  };

  get value(): string {
    return this.text.length > OUTPUT_CAP ? this.text.slice(-OUTPUT_CAP) : this.text;
  }
}

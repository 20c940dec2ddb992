/**
 * A local sandbox's files, as the worker reads and writes them from the host. Commands control
 * everything under the workspace and scratch directories, and the worker is often root: every
 * path is checked to stay inside them and refused when it passes through a symlink, and what the
 * worker creates is handed to the sandbox's uid (or to root, for a file it must not change).
 */
import { createReadStream } from 'node:fs';
import { constants as fsConstants } from 'node:fs';
import { type FileHandle, chown, lstat, mkdir, open, readFile } from 'node:fs/promises';
import path from 'node:path';

/** A directory as commands see it (`inside`) and where it is on the host. */
export interface MappedDir {
  inside: string;
  host: string;
}

/** The host path of a sandbox path, which must lie in one of `dirs`. */
export function hostPathIn(dirs: MappedDir[], inside: string): string {
  const normalized = path.posix.normalize(inside);
  for (const dir of dirs) {
    if (normalized === dir.inside || normalized.startsWith(dir.inside + '/')) {
      return path.join(dir.host, normalized.slice(dir.inside.length));
    }
  }
  throw new Error(`path ${inside} is outside the sandbox's workspace and scratch directories`);
}

export interface FileOptions {
  readOnly?: boolean;
  executable?: boolean;
}

export class SandboxFiles {
  constructor(
    /** The sandbox's directory on the host, which holds every mapped directory. */
    private readonly root: string,
    private readonly dirs: MappedDir[],
    /** Who owns what the worker creates; undefined when the worker hands out no uid. */
    private readonly uid: number | undefined,
  ) {}

  hostPath(inside: string): string {
    return hostPathIn(this.dirs, inside);
  }

  /**
   * Refuses a path through a symlink: commands control everything under workspace and scratch,
   * and following a link they planted (scratch/prompt.md -> /root/.bashrc) would let our own
   * reads and writes, as the host user, reach anywhere on the host.
   */
  private async checkNoSymlinks(host: string): Promise<void> {
    let at = this.root;
    for (const part of path.relative(this.root, host).split(path.sep)) {
      at = path.join(at, part);
      const st = await lstat(at).catch(() => undefined);
      if (!st) return; // The rest does not exist yet: mkdir/writeFile create real entries.
      if (st.isSymbolicLink()) throw new Error(`path ${at} in the sandbox is a symbolic link; refusing to follow it`);
    }
  }

  async writeFile(inside: string, data: Uint8Array | string, options: FileOptions = {}): Promise<void> {
    await this.create(inside, options, (file) => file.writeFile(data));
  }

  async copyIn(hostPath: string, inside: string): Promise<void> {
    await this.create(inside, {}, async (file) => {
      for await (const chunk of createReadStream(hostPath)) await file.write(chunk as Buffer);
    });
  }

  /** Creates (or truncates) a file for the sandbox, fills it with `fill`, then sets its owner and mode. */
  private async create(inside: string, options: FileOptions, fill: (file: FileHandle) => Promise<void>): Promise<void> {
    const host = this.hostPath(inside);
    await this.checkNoSymlinks(host);
    // Who owns what we create: the sandbox's uid, or root for a file it must not change.
    const owner = this.uid === undefined ? undefined : options.readOnly ? 0 : this.uid;
    const created = await mkdir(path.dirname(host), { recursive: true });
    // Directories are the sandbox's even for a read-only file: it may remove the file (and the
    // next checkout must be able to), it just cannot change what the file says.
    if (created !== undefined && this.uid !== undefined) {
      for (let dir = path.dirname(host); dir.length >= created.length; dir = path.dirname(dir))
        await chown(dir, this.uid, this.uid);
    }
    // O_NOFOLLOW: a symlink planted since the check above is refused rather than followed.
    const file = await open(
      host,
      fsConstants.O_WRONLY | fsConstants.O_CREAT | fsConstants.O_TRUNC | fsConstants.O_NOFOLLOW,
      0o644,
    );
    try {
      await fill(file);
      if (owner !== undefined) await file.chown(owner, owner);
      await file.chmod((options.readOnly ? 0o444 : 0o644) | (options.executable ? 0o111 : 0));
    } finally {
      await file.close();
    }
  }

  async readFile(inside: string): Promise<Uint8Array> {
    const host = this.hostPath(inside);
    await this.checkNoSymlinks(host);
    return readFile(host);
  }

  async copyOut(inside: string, hostPath: string): Promise<void> {
    const host = this.hostPath(inside);
    await this.checkNoSymlinks(host);
    // O_NONBLOCK: opening a FIFO the sandbox planted must not wait for a writer; it is refused below.
    const file = await open(host, fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW | fsConstants.O_NONBLOCK);
    try {
      if (!(await file.stat()).isFile()) throw new Error(`path ${inside} in the sandbox is not a regular file`);
      const out = await open(hostPath, 'w', 0o600);
      try {
        const buffer = Buffer.alloc(1024 * 1024);
        for (let n; (n = (await file.read(buffer, 0, buffer.length)).bytesRead) > 0;) await out.write(buffer, 0, n);
      } finally {
        await out.close();
      }
    } finally {
      await file.close();
    }
  }
}

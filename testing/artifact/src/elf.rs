//! Just enough ELF to say what a Lambda host must provide for a binary: the machine it is built for
//! and the symbol versions it needs from shared libraries (the GNU version needs, `.gnu.version_r`,
//! that the dynamic loader checks before `main` runs). Little-endian ELF64 only: x86_64 and
//! aarch64, Lambda's two architectures.

use std::fmt;

use anyhow::{bail, Context as _};

const SHT_GNU_VERNEED: u32 = 0x6fff_fffe;
const EM_X86_64: u16 = 62;
const EM_AARCH64: u16 = 183;

/// The instruction set an ELF file is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Machine {
    X86_64,
    Aarch64,
    Other(u16),
}

/// One symbol version a binary needs from a shared library, e.g. `libc.so.6` / `GLIBC_2.34`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionNeed {
    pub library: String,
    pub version: String,
}

/// A glibc symbol version, `GLIBC_{major}.{minor}[.{patch}]`, ordered numerically.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct GlibcVersion(pub u32, pub u32, pub u32);

impl GlibcVersion {
    /// `GLIBC_2.34` → 2.34.0; `None` for anything else (`GLIBC_PRIVATE`, `GCC_3.0`, …).
    pub fn parse(name: &str) -> Option<GlibcVersion> {
        let mut parts = name.strip_prefix("GLIBC_")?.split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        let patch = match parts.next() {
            Some(patch) => patch.parse().ok()?,
            None => 0,
        };
        if parts.next().is_some() {
            return None;
        }
        Some(GlibcVersion(major, minor, patch))
    }
}

impl fmt::Display for GlibcVersion {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GlibcVersion(major, minor, 0) => write!(formatter, "{major}.{minor}"),
            GlibcVersion(major, minor, patch) => write!(formatter, "{major}.{minor}.{patch}"),
        }
    }
}

/// What an ELF file asks of the host.
#[derive(Clone, Debug)]
pub struct Elf {
    pub machine: Machine,
    pub needs: Vec<VersionNeed>,
}

impl Elf {
    /// Reads the machine and the version needs of a little-endian ELF64 file.
    pub fn parse(bytes: &[u8]) -> anyhow::Result<Elf> {
        let file = Bytes(bytes);
        if bytes.get(..4) != Some(b"\x7fELF".as_slice()) {
            bail!("not an ELF file");
        }
        if bytes.get(4..6) != Some([2u8, 1].as_slice()) {
            bail!("not a little-endian 64-bit ELF file");
        }
        let machine = match file.u16(0x12)? {
            EM_X86_64 => Machine::X86_64,
            EM_AARCH64 => Machine::Aarch64,
            other => Machine::Other(other),
        };
        let sections = file.u64(0x28)?;
        let entry_size = u64::from(file.u16(0x3a)?);
        let count = u64::from(file.u16(0x3c)?);
        let section = |index: u64| -> anyhow::Result<Section> {
            let at = sections + index * entry_size;
            Ok(Section {
                kind: file.u32(at + 4)?,
                offset: file.u64(at + 24)?,
                size: file.u64(at + 32)?,
                link: file.u32(at + 40)?,
                info: file.u32(at + 44)?,
            })
        };
        let mut needs = Vec::new();
        for index in 0..count {
            let verneed = section(index)?;
            if verneed.kind != SHT_GNU_VERNEED {
                continue;
            }
            let strings = section(u64::from(verneed.link))?;
            let name = |offset: u32| file.string(strings.offset, strings.size, offset);
            let mut entry = verneed.offset;
            for _ in 0..verneed.info {
                let aux_count = file.u16(entry + 2)?;
                let library = name(file.u32(entry + 4)?)?;
                let mut aux = entry + u64::from(file.u32(entry + 8)?);
                for _ in 0..aux_count {
                    needs.push(VersionNeed {
                        library: library.clone(),
                        version: name(file.u32(aux + 8)?)?,
                    });
                    aux += u64::from(file.u32(aux + 12)?);
                }
                entry += u64::from(file.u32(entry + 12)?);
            }
        }
        Ok(Elf { machine, needs })
    }

    /// The highest `GLIBC_x.y` version the file needs; `None` when it needs none (a static binary).
    pub fn highest_glibc(&self) -> Option<GlibcVersion> {
        self.needs
            .iter()
            .filter_map(|need| GlibcVersion::parse(&need.version))
            .max()
    }
}

struct Section {
    kind: u32,
    offset: u64,
    size: u64,
    link: u32,
    info: u32,
}

/// Bounds-checked little-endian reads.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn slice<const N: usize>(&self, at: u64) -> anyhow::Result<[u8; N]> {
        let start = usize::try_from(at).context("offset out of range")?;
        self.0
            .get(start..start.saturating_add(N))
            .and_then(|bytes| bytes.try_into().ok())
            .with_context(|| format!("truncated ELF file: {N} bytes at {at:#x}"))
    }

    fn u16(&self, at: u64) -> anyhow::Result<u16> {
        self.slice(at).map(u16::from_le_bytes)
    }

    fn u32(&self, at: u64) -> anyhow::Result<u32> {
        self.slice(at).map(u32::from_le_bytes)
    }

    fn u64(&self, at: u64) -> anyhow::Result<u64> {
        self.slice(at).map(u64::from_le_bytes)
    }

    /// The NUL-terminated string at `offset` in the string table at `table` of `size` bytes.
    fn string(&self, table: u64, size: u64, offset: u32) -> anyhow::Result<String> {
        let start = usize::try_from(table + u64::from(offset)).context("offset out of range")?;
        let end = usize::try_from(table + size).context("offset out of range")?;
        let bytes = self
            .0
            .get(start..end)
            .context("string outside the string table")?;
        let length = bytes
            .iter()
            .position(|byte| *byte == 0)
            .context("unterminated string")?;
        Ok(String::from_utf8_lossy(&bytes[..length]).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glibc_versions_order_numerically() {
        let v = |name| GlibcVersion::parse(name).expect(name);
        assert!(v("GLIBC_2.34") > v("GLIBC_2.4"));
        assert!(v("GLIBC_2.2.5") < v("GLIBC_2.3"));
        assert!(v("GLIBC_2.35") > v("GLIBC_2.34"));
        assert_eq!(GlibcVersion::parse("GLIBC_PRIVATE"), None);
        assert_eq!(GlibcVersion::parse("GCC_3.0"), None);
        assert_eq!(v("GLIBC_2.34").to_string(), "2.34");
    }

    #[test]
    fn this_test_binary_needs_the_x86_64_glibc_baseline() {
        let exe = std::env::current_exe().expect("current exe");
        let elf = Elf::parse(&std::fs::read(exe).expect("read")).expect("parse");
        if cfg!(all(target_arch = "x86_64", target_env = "gnu")) {
            assert_eq!(elf.machine, Machine::X86_64);
            // Every x86_64 glibc program needs the architecture's first symbol version.
            assert!(
                elf.needs.contains(&VersionNeed {
                    library: "libc.so.6".to_owned(),
                    version: "GLIBC_2.2.5".to_owned(),
                }),
                "{:?}",
                elf.needs
            );
            assert!(elf.highest_glibc() >= Some(GlibcVersion(2, 2, 5)));
        }
    }

    #[test]
    fn other_files_are_refused() {
        assert!(Elf::parse(b"#!/bin/sh\n").is_err());
        let exe = std::fs::read(std::env::current_exe().expect("exe")).expect("read");
        assert!(Elf::parse(&exe[..0x30]).is_err(), "a truncated header");
    }
}

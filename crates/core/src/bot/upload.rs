//! Files a handler uploads with a call (`Context::send_with_files`): the bytes, sent as a
//! `multipart/form-data` part, and named in the payload by `attach://NAME`
//! ([`Upload::input_file`]), which Telegram resolves for a top-level file field (`photo`,
//! `document`, …) and for each `media` of a media group alike.
//!
//! An upload is an action like any call: once Telegram's answer is recorded (the file's `file_id`
//! among it), a retried update gets the answer back and uploads nothing again. Telegram takes
//! uploads of up to [`MAX_UPLOAD_BYTES`] from a bot, and lets it download files of up to
//! [`MAX_DOWNLOAD_BYTES`]; larger ones are refused here, naming the file and its size.

use std::path::Path;

use bytes::Bytes;
use sha2::{Digest as _, Sha256};
use teloxide_core::types::InputFile;

/// The most a bot may upload in one file: 50 MB.
pub const MAX_UPLOAD_BYTES: u64 = 50 * 1000 * 1000;
/// The most a bot may download of one file (`getFile`): 20 MB.
pub const MAX_DOWNLOAD_BYTES: u64 = 20 * 1000 * 1000;

/// A file to upload with a call.
#[derive(Clone, PartialEq, Eq)]
pub struct Upload {
    name: String,
    file_name: String,
    sha256: String,
    bytes: Bytes,
}

/// A file Telegram would not take, or one that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// Over Telegram's upload limit.
    #[error("{file_name} is {bytes} bytes; Telegram takes uploads of up to 50 MB from a bot")]
    TooLarge {
        /// The file's name.
        file_name: String,
        /// Its size.
        bytes: u64,
    },
    /// The file could not be read.
    #[error("cannot read {path}: {reason}")]
    Unreadable {
        /// Where it was to be read.
        path: String,
        /// Why it was not.
        reason: String,
    },
}

impl Upload {
    /// A file from memory, named `file_name` for the chat (`report.pdf`).
    pub fn bytes(
        file_name: impl Into<String>,
        bytes: impl Into<Bytes>,
    ) -> Result<Upload, UploadError> {
        let file_name = file_name.into();
        let bytes = bytes.into();
        if bytes.len() as u64 > MAX_UPLOAD_BYTES {
            return Err(UploadError::TooLarge {
                file_name,
                bytes: bytes.len() as u64,
            });
        }
        let sha256 = hex(&Sha256::digest(&bytes));
        // Named by content: the same file twice in one call is one part, and a run that uploads
        // the same bytes again names them the same.
        let name = format!("file_{}", &sha256[..16]);
        Ok(Upload {
            name,
            file_name,
            sha256,
            bytes,
        })
    }

    /// A file read from `path`, named by its last component.
    pub async fn path(path: impl AsRef<Path>) -> Result<Upload, UploadError> {
        let path = path.as_ref();
        let unreadable = |e: std::io::Error| UploadError::Unreadable {
            path: path.display().to_string(),
            reason: e.to_string(),
        };
        let file_name = path
            .file_name()
            .map_or_else(|| "file".to_owned(), |n| n.to_string_lossy().into_owned());
        let size = tokio::fs::metadata(path).await.map_err(unreadable)?.len();
        if size > MAX_UPLOAD_BYTES {
            return Err(UploadError::TooLarge {
                file_name,
                bytes: size,
            });
        }
        let bytes = tokio::fs::read(path).await.map_err(unreadable)?;
        Upload::bytes(file_name, bytes)
    }

    /// What the payload's file field holds for this upload: `attach://NAME`.
    pub fn input_file(&self) -> InputFile {
        let attach = format!("attach://{}", self.name);
        InputFile::url(attach.parse().expect("attach://NAME is a URL"))
    }

    /// The name of its multipart part.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its name for the chat.
    pub fn file_name(&self) -> &str {
        &self.file_name
    }

    /// Its size in bytes.
    pub fn size(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// The SHA-256 of its bytes, in hex.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// Its bytes.
    pub fn contents(&self) -> &Bytes {
        &self.bytes
    }

    /// What is kept of it where the bytes are not: name, size and hash.
    pub fn describe(&self) -> serde_json::Value {
        serde_json::json!({
            "attach": self.name, "file_name": self.file_name, "size": self.size(),
            "sha256": self.sha256,
        })
    }
}

impl std::fmt::Debug for Upload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upload")
            .field("name", &self.name)
            .field("file_name", &self.file_name)
            .field("size", &self.size())
            .finish_non_exhaustive()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upload_is_named_by_its_content_and_attached_by_that_name() {
        let a = Upload::bytes("a.txt", &b"hello"[..]).unwrap();
        let b = Upload::bytes("b.txt", &b"hello"[..]).unwrap();
        assert_eq!(a.name(), b.name());
        assert_eq!(
            a.sha256(),
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        let field = serde_json::to_value(a.input_file()).unwrap();
        assert_eq!(field, format!("attach://{}", a.name()));
        assert_eq!(a.describe()["size"], 5);
    }

    #[test]
    fn a_file_over_telegram_s_upload_limit_is_refused_with_its_name_and_size() {
        let big = vec![0u8; MAX_UPLOAD_BYTES as usize + 1];
        let error = Upload::bytes("big.bin", big).unwrap_err();
        assert_eq!(
            error.to_string(),
            "big.bin is 50000001 bytes; Telegram takes uploads of up to 50 MB from a bot"
        );
    }
}

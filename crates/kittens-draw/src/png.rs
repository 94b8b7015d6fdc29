//! A minimal PNG encoder: 8-bit RGB, filter 0 on every scanline, stored (uncompressed) deflate blocks —
//! enough for the small pictures the planners draw, with no image library.

/// Encode 8-bit RGB pixels as a PNG file (filter 0 on every scanline, stored deflate blocks).
pub fn encode_png(width: u32, height: u32, rgb: &[u8]) -> Vec<u8> {
    let mut raw = Vec::with_capacity(rgb.len() + height as usize);
    for row in rgb.chunks(width as usize * 3) {
        raw.push(0);
        raw.extend_from_slice(row);
    }
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]); // 8-bit, truecolour, deflate, filter 0, no interlace
    let mut out = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(&mut out, b"IDAT", &zlib_stored(&raw));
    chunk(&mut out, b"IEND", &[]);
    out
}

fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = out.len();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let crc = crc32(&out[start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

/// zlib stream of stored (uncompressed) deflate blocks, RFC 1950/1951.
fn zlib_stored(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x78, 0x01];
    let blocks: Vec<&[u8]> = if data.is_empty() {
        vec![&[][..]]
    } else {
        data.chunks(65535).collect()
    };
    for (i, b) in blocks.iter().enumerate() {
        out.push(u8::from(i + 1 == blocks.len()));
        let len = b.len() as u16;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(b);
    }
    let (mut a, mut s) = (1u32, 0u32);
    for &byte in data {
        a = (a + byte as u32) % 65521;
        s = (s + a) % 65521;
    }
    out.extend_from_slice(&((s << 16) | a).to_be_bytes());
    out
}

/// CRC-32 (IEEE, reflected, polynomial 0xEDB88320) as PNG chunks require.
pub fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CRC-32 check value of "123456789" is 0xCBF43926 (the standard's test vector).
    #[test]
    fn crc_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    /// Signature, IHDR with the size, and IEND at the end; the stored block holds every scanline with
    /// its filter byte (3 × 2 pixels: 2 rows of 1 + 9 bytes).
    #[test]
    fn png_layout() {
        let px: Vec<u8> = (0..18).collect();
        let f = encode_png(3, 2, &px);
        assert_eq!(&f[..8], &[0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a]);
        assert_eq!(&f[12..16], b"IHDR");
        assert_eq!(&f[16..24], &[0, 0, 0, 3, 0, 0, 0, 2]);
        assert_eq!(&f[f.len() - 8..f.len() - 4], b"IEND");
        let idat = f.windows(4).position(|w| w == b"IDAT").expect("IDAT");
        let len = u32::from_be_bytes(f[idat - 4..idat].try_into().unwrap()) as usize;
        // zlib header (2) + block header (5) + 20 bytes of scanlines + Adler-32 (4).
        assert_eq!(len, 2 + 5 + 20 + 4);
        assert_eq!(f[idat + 4 + 7], 0, "filter byte of row 0");
        assert_eq!(f[idat + 4 + 7 + 10], 0, "filter byte of row 1");
    }
}

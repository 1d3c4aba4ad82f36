package redistest

import (
	"strconv"
	"strings"
)

// Slots is the number of hash slots of a Redis Cluster.
const Slots = 16384

// Slot is the cluster hash slot of key, as the server computes it
// (CLUSTER KEYSLOT): CRC16-XMODEM of the key's hash tag — the part between
// the first '{' and the first '}' after it, when that part is not empty —
// or of the whole key, mod 16384.
func Slot(key string) int {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if n := strings.IndexByte(key[open+1:], '}'); n > 0 {
			key = key[open+1 : open+1+n]
		}
	}
	return int(crc16(key)) % Slots
}

// crc16 is CRC-16/XMODEM: polynomial 0x1021, initial value 0, no
// reflection, no final xor — the checksum Redis Cluster hashes keys with.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// tagFor is a hash tag whose slot is slot: keys "{tag}..." live in it.
func tagFor(slot int) string {
	for i := 0; ; i++ {
		tag := "fill" + strconv.Itoa(i)
		if Slot(tag) == slot {
			return tag
		}
	}
}

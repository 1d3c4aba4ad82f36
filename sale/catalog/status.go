package catalog

import "strconv"

// AppendStatus appends the JSON answer of GET /api/seckill/status:
// {productId, name, price, image, status, serverTimeMs, startMs, endMs,
// limit, stock, remaining}. Built by hand with append so answering the
// most-polled endpoint allocates nothing. Names and images were validated
// when the activity was built, but are escaped anyway.
func (e Entry) AppendStatus(dst []byte, nowMs int64) []byte {
	a := e.Sale
	dst = append(dst, `{"productId":`...)
	dst = appendJSONString(dst, a.ProductID)
	dst = append(dst, `,"name":`...)
	dst = appendJSONString(dst, a.Name)
	dst = append(dst, `,"price":"`...)
	dst = AppendPrice(dst, a.PriceCents)
	dst = append(dst, `","image":`...)
	dst = appendJSONString(dst, a.Image)
	dst = append(dst, `,"status":"`...)
	dst = append(dst, a.PhaseAt(nowMs, e.SoldOut()).String()...)
	dst = append(dst, `","serverTimeMs":`...)
	dst = strconv.AppendInt(dst, nowMs, 10)
	dst = append(dst, `,"startMs":`...)
	dst = strconv.AppendInt(dst, a.StartMs, 10)
	dst = append(dst, `,"endMs":`...)
	dst = strconv.AppendInt(dst, a.EndMs, 10)
	dst = append(dst, `,"limit":`...)
	dst = strconv.AppendInt(dst, int64(a.Limit), 10)
	dst = append(dst, `,"stock":`...)
	dst = strconv.AppendInt(dst, a.Stock, 10)
	if r := e.Remaining(); r >= 0 {
		dst = append(dst, `,"remaining":`...)
		dst = strconv.AppendInt(dst, r, 10)
	}
	if room := a.Room; room != nil {
		// The page becomes the waiting room: when the queue opens, and
		// whether joining asks a proof of work.
		dst = append(dst, `,"waitingRoom":{"queueOpensMs":`...)
		dst = strconv.AppendInt(dst, room.OpensMs, 10)
		dst = append(dst, `,"order":"`...)
		dst = append(dst, room.Order.String()...)
		dst = append(dst, `","difficulty":`...)
		dst = strconv.AppendInt(dst, int64(room.Difficulty), 10)
		dst = append(dst, `,"sessionMs":`...)
		dst = strconv.AppendInt(dst, room.SessionMs, 10)
		dst = append(dst, '}')
	}
	return append(dst, '}')
}

const hexDigits = "0123456789abcdef"

func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c < 0x20 || c == '<' || c == '>' || c == '&':
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}

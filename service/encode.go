package service

import (
	"encoding/json"
	"strconv"
)

// appendAnswer appends a's JSON as json.Marshal writes it (the same keys, order, omissions and
// escapes; TestAppendAnswer holds it to that), without reflection: the batch hot path.
func appendAnswer(b []byte, a *Answer) []byte {
	q := &a.Query
	b = append(b, `{"query":{"topology":`...)
	b = appendString(b, q.Topology)
	b = append(b, `,"n_nodes":`...)
	b = strconv.AppendInt(b, int64(q.NNodes), 10)
	b = append(b, `,"n_ranks":`...)
	b = strconv.AppendInt(b, int64(q.NRanks), 10)
	b = append(b, `,"coll":`...)
	b = appendString(b, q.Coll)
	b = append(b, `,"bytes":`...)
	b = strconv.AppendInt(b, q.Bytes, 10)
	b = append(b, `,"op":`...)
	b = appendString(b, q.Op)
	b = append(b, `,"dtype":`...)
	b = appendString(b, q.Dtype)
	b = append(b, `,"pipe_ops":`...)
	b = strconv.AppendInt(b, int64(q.PipeOps), 10)
	b = append(b, `,"reg_buff":`...)
	b = strconv.AppendBool(b, q.RegBuff)
	b = append(b, `},"algo":`...)
	b = appendString(b, a.Algo)
	b = append(b, `,"proto":`...)
	b = appendString(b, a.Proto)
	b = append(b, `,"time_us":`...)
	b = a.TimeUS.AppendJSON(b)
	b = append(b, `,"forced":`...)
	b = strconv.AppendBool(b, a.Forced)
	if a.ForcedBy != "" {
		b = append(b, `,"forced_by":`...)
		b = appendString(b, a.ForcedBy)
	}
	b = append(b, `,"channels":`...)
	b = strconv.AppendInt(b, int64(a.Channels), 10)
	b = append(b, `,"threads":`...)
	b = strconv.AppendInt(b, int64(a.Threads), 10)
	b = append(b, `,"warps":`...)
	b = strconv.AppendInt(b, int64(a.Warps), 10)
	b = append(b, `,"chunk_bytes":`...)
	b = strconv.AppendInt(b, a.ChunkBytes, 10)
	b = append(b, `,"slice_bytes":`...)
	b = strconv.AppendInt(b, a.SliceBytes, 10)
	b = append(b, `,"tuner":`...)
	b = appendString(b, a.Tuner)
	if a.TunerNote != "" {
		b = append(b, `,"tuner_note":`...)
		b = appendString(b, a.TunerNote)
	}
	b = append(b, `,"policy":`...)
	b = appendString(b, a.Policy)
	return append(b, '}')
}

// appendAnswers appends the Batch of answers as json.Marshal writes it.
func appendAnswers(b []byte, gen uint64, as []Answer) []byte {
	b = append(b, `{"generation":`...)
	b = strconv.AppendUint(b, gen, 10)
	b = append(b, `,"results":[`...)
	for i := range as {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendAnswer(b, &as[i])
	}
	return append(b, "]}"...)
}

// appendString appends s quoted as encoding/json quotes it: printable ASCII other than the quote,
// the backslash and json's HTML escapes goes as is; anything else through json.Marshal.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

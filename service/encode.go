package service

import (
	"strconv"

	"github.com/collplan/collplan/report"
)

// appendAnswers appends the Batch of answers as json.Marshal writes it.
func appendAnswers(b []byte, gen uint64, as []report.Decision) []byte {
	b = append(b, `{"generation":`...)
	b = strconv.AppendUint(b, gen, 10)
	b = append(b, `,"results":[`...)
	for i := range as {
		if i > 0 {
			b = append(b, ',')
		}
		b = as[i].AppendJSON(b)
	}
	return append(b, "]}"...)
}

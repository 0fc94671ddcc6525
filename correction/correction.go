// Package correction holds bandwidth correction factors: a multiplier on a cell's bandwidth per
// (collective, algorithm, protocol) and log2 size bucket, where the alpha-beta form cannot follow
// the measurements. NCCL's treeCorrectionFactor is the default; calibrate fits and writes others.
package correction

import (
	"fmt"
	"math"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/tables"
)

// NumBuckets is the number of size buckets: bucket i covers [64*2^i, 64*2^(i+1)) bytes, so the
// last (23) starts at 512 MiB. Sizes below 64 B and from 1 GiB up are never corrected.
const NumBuckets = 24

// Bucket is NCCL's logSize = log2i(nBytes >> 6): -1 below 64 bytes.
func Bucket(nBytes int64) int { return costmodel.Log2i(nBytes >> 6) }

// BucketStart is the first byte count of bucket i (64 * 2^i).
func BucketStart(i int) int64 { return 64 << i }

// treeCorrectionFactor is NCCL 2.30's table [proto][bucket] (reference §6).
func treeCorrectionFactor() [costmodel.NumProtos][NumBuckets]float32 {
	return [costmodel.NumProtos][NumBuckets]float32{
		{1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0},
		{1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0},
		{.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9},
	}
}

// Source says where a cell's factors came from.
type Source string

// Sources of factors.
const (
	SourceNone  Source = ""
	SourceNCCL  Source = "nccl treeCorrectionFactor"
	SourceTable Source = "node table"
)

// Factors maps cells and buckets to bandwidth multipliers. The zero value corrects nothing.
type Factors struct {
	f   [costmodel.NumColls][costmodel.NumAlgos][costmodel.NumProtos][NumBuckets]float32
	src [costmodel.NumColls][costmodel.NumAlgos][costmodel.NumProtos]Source
}

// Default returns NCCL 2.30's corrections for a topology: treeCorrectionFactor on Tree AllReduce for
// buckets 0..22, and on NVLSTree AllReduce for buckets 0..23 when min_comp_cap >= 100 on x86
// (reference §6 steps 3-4).
func Default(t *capabilities.Topology) *Factors {
	var fs Factors
	tcf := treeCorrectionFactor()
	for p := costmodel.Proto(0); p < costmodel.NumProtos; p++ {
		for i := 0; i < NumBuckets-1; i++ {
			fs.f[costmodel.AllReduce][costmodel.Tree][p][i] = tcf[p][i]
		}
		fs.src[costmodel.AllReduce][costmodel.Tree][p] = SourceNCCL
		if t.MinCompCap >= 100 && t.CPUArch == capabilities.ArchX86 {
			fs.f[costmodel.AllReduce][costmodel.NVLSTree][p] = tcf[p]
			fs.src[costmodel.AllReduce][costmodel.NVLSTree][p] = SourceNCCL
		}
	}
	return &fs
}

// Factor returns the multiplier for a cell at nBytes: 1 when the cell has no factors or the size is
// outside the buckets.
func (fs *Factors) Factor(c costmodel.Coll, a costmodel.Algo, p costmodel.Proto, nBytes int64) float32 {
	if fs == nil || fs.src[c][a][p] == SourceNone {
		return 1
	}
	i := Bucket(nBytes)
	if i < 0 || i >= NumBuckets {
		return 1
	}
	if v := fs.f[c][a][p][i]; v != 0 {
		return v
	}
	return 1
}

// Source reports where a cell's factors come from ("" when uncorrected).
func (fs *Factors) Source(c costmodel.Coll, a costmodel.Algo, p costmodel.Proto) Source {
	if fs == nil {
		return SourceNone
	}
	return fs.src[c][a][p]
}

// Set replaces a cell's factors; missing trailing buckets are 1. Each factor must be finite and > 0.
func (fs *Factors) Set(c costmodel.Coll, a costmodel.Algo, p costmodel.Proto, factors []float64, src Source) error {
	if len(factors) > NumBuckets {
		return fmt.Errorf("correction: %s/%s/%s: %d factors, at most %d", c, a, p, len(factors), NumBuckets)
	}
	var row [NumBuckets]float32
	for i, v := range factors {
		if !(v > 0) || math.IsInf(v, 0) {
			return fmt.Errorf("correction: %s/%s/%s: factor %d is %v, want finite and > 0", c, a, p, i, v)
		}
		row[i] = float32(v)
	}
	for i := len(factors); i < NumBuckets; i++ {
		row[i] = 1
	}
	fs.f[c][a][p], fs.src[c][a][p] = row, src
	return nil
}

// Apply sets the cells a node table's [corrections] gives over fs at a shape of nodes x
// ranksPerNode: the rows without a shape first, then the rows of that shape, which replace their
// cells' (tables.CorrectionCell.At). Errors name the table file.
func (fs *Factors) Apply(n *tables.Node, nodes, ranksPerNode int) error {
	if n == nil || n.Corrections == nil {
		return nil
	}
	for pass := 0; pass < 2; pass++ {
		for i, cell := range n.Corrections.Cell {
			if (cell.Nodes != 0) != (pass == 1) || !cell.At(nodes, ranksPerNode) {
				continue
			}
			if err := fs.applyCell(cell); err != nil {
				return fmt.Errorf("correction: %s: corrections.cell[%d]: %w", n.File, i, err)
			}
		}
	}
	return nil
}

// applyCell sets one [corrections] row.
func (fs *Factors) applyCell(cell tables.CorrectionCell) error {
	c, err := capabilities.ParseColl(cell.Coll)
	if err != nil {
		return err
	}
	a, err := capabilities.ParseAlgo(cell.Algo)
	if err != nil {
		return err
	}
	p, err := capabilities.ParseProto(cell.Proto)
	if err != nil {
		return err
	}
	return fs.Set(c, a, p, cell.Factors, SourceTable)
}

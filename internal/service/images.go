package service

import (
	"context"
	"sync"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/driver"
)

// Imager is what the API asks of the lifecycle about the driver's images;
// *lifecycle.Manager implements it, and answers errdefs.ErrNotImplemented
// (naming the driver) for a driver that keeps no images.
type Imager interface {
	PullImage(ctx context.Context, ref string, ifNeeded bool, progress func(driver.ImageProgress)) (*driver.ImageInfo, error)
	ListImages(ctx context.Context) ([]driver.ImageInfo, error)
	RemoveImage(ctx context.Context, ref string) (driver.ImageInfo, error)
	PruneImages(ctx context.Context) ([]driver.ImageInfo, error)
}

func imageToProto(img driver.ImageInfo) *corralv1.Image {
	return &corralv1.Image{Id: img.ID, Refs: img.Refs, Size: img.Size, Created: ts(img.Created), Sandboxes: int32(img.Sandboxes)}
}

func (s *service) PullImage(req *corralv1.PullImageRequest, stream corralv1.SandboxService_PullImageServer) error {
	var (
		mu      sync.Mutex // a driver may report layers from several goroutines
		sendErr error
	)
	img, err := s.images.PullImage(stream.Context(), req.GetImage(), req.GetIfNeeded(), func(p driver.ImageProgress) {
		mu.Lock()
		defer mu.Unlock()
		if sendErr == nil { // a caller gone away ends the pull through the context
			sendErr = stream.Send(&corralv1.PullImageProgress{Layer: p.Layer, Status: p.Status, Current: p.Current, Total: p.Total})
		}
	})
	if err != nil {
		return toGRPC(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if sendErr != nil {
		return sendErr
	}
	if img == nil {
		return nil // nothing was needed
	}
	return stream.Send(&corralv1.PullImageProgress{Status: "done", Image: imageToProto(*img)})
}

func (s *service) ListImages(ctx context.Context, _ *corralv1.ListImagesRequest) (*corralv1.ListImagesResponse, error) {
	list, err := s.images.ListImages(ctx)
	if err != nil {
		return nil, toGRPC(err)
	}
	resp := &corralv1.ListImagesResponse{Images: make([]*corralv1.Image, 0, len(list))}
	for _, img := range list {
		resp.Images = append(resp.Images, imageToProto(img))
	}
	return resp, nil
}

func (s *service) RemoveImage(ctx context.Context, req *corralv1.RemoveImageRequest) (*corralv1.Image, error) {
	img, err := s.images.RemoveImage(ctx, req.GetImage())
	if err != nil {
		return nil, toGRPC(err)
	}
	return imageToProto(img), nil
}

func (s *service) PruneImages(ctx context.Context, _ *corralv1.PruneImagesRequest) (*corralv1.PruneImagesResponse, error) {
	removed, err := s.images.PruneImages(ctx)
	if err != nil {
		return nil, toGRPC(err)
	}
	resp := &corralv1.PruneImagesResponse{Removed: make([]*corralv1.Image, 0, len(removed))}
	for _, img := range removed {
		resp.Removed = append(resp.Removed, imageToProto(img))
		resp.SpaceFreed += img.Size
	}
	return resp, nil
}
